#include "replay/run_replay.h"

#include "replay/op_replay.h"
#include "util/atomic_file.h"
#include "util/errors.h"
#include "util/progress.h"

#include <fmt/format.h>
#include <fstream>
#include <memory>

namespace kvsim {

namespace {
std::string first_line(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw input_error(path, 0, "", "cannot open trace file");
    }
    std::string line;
    std::getline(in, line);
    return line;
}

void print_op_summary(std::ostream & term, const replay_options & opt, const context & ctx, const op_replay_result & r) {
    const auto & s = ctx.sizes();
    term << fmt::format("kvsim replay {} (op trace, model {})\n", opt.trace, ctx.model().name);
    term << fmt::format("  n_ctx {}  n_ctx_seq {}  n_stream {}  n_batch {}  n_ubatch {}{}\n", s.n_ctx, s.n_ctx_seq,
                        s.n_stream, s.n_batch, s.n_ubatch, s.swa_size ? fmt::format("  swa cache {} cells", s.swa_size) : "");
    term << fmt::format("  decodes {} (ok {}, no slot {}, invalid {})  seq ops {}  ubatches {}  tokens placed {}\n",
                        r.n_decode, r.n_decode_ok, r.n_no_slot, r.n_invalid, r.n_seq_ops, r.n_ubatches, r.n_tokens_placed);
    for (const kv_cache * c : ctx.memory().caches()) {
        uint32_t used = 0;
        for (uint32_t st = 0; st < c->get_n_stream(); ++st) used += c->cells(st).get_used();
        term << fmt::format("  cache {}: {} streams x {} cells, {} used at the end\n", c->name(), c->get_n_stream(),
                            c->get_size(), used);
    }
}

void replay_op_trace(const replay_options & opt, std::ostream & term) {
    const op_trace t = read_op_trace(opt.trace);
    context ctx(opt.model, opt.ctx);
    std::unique_ptr<atomic_file> dump_file;
    std::unique_ptr<cell_dumper> dump;
    if (!opt.dump_cells.empty()) {
        dump_file = std::make_unique<atomic_file>(opt.dump_cells);
        dump = std::make_unique<cell_dumper>(dump_file->out());
        dump->config(ctx);
    }
    progress_bar bar("replay", opt.progress);
    const op_replay_result r = replay_ops(t, ctx, dump.get(), nullptr,
                                          [&](size_t done, size_t total) { bar.update(done, total); });
    bar.finish();
    if (dump_file) {
        dump_file->commit();
    }
    if (!opt.quiet) {
        print_op_summary(term, opt, ctx, r);
    }
}
}  // namespace

void run_replay(const replay_options & opt, std::ostream & term) {
    std::string fmt_name = opt.format;
    if (fmt_name == "auto") {
        fmt_name = looks_like_op_trace(first_line(opt.trace)) ? "ops" : "request";
    }
    if (fmt_name == "ops") {
        replay_op_trace(opt, term);
        return;
    }
    throw usage_error("request traces are not supported yet by this build (format " + fmt_name + ")");
}

}  // namespace kvsim
