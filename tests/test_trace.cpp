// Native op trace reader/writer (lib/trace/op_trace.h).
#include "trace/op_trace.h"
#include "core/errors.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>
#include <string>

using namespace kvsim;

namespace {

const std::string k_header = "batch,op,seq,n_tokens,p0,p1,delta,seq_dst\n";

std::string ops_dir() { return std::string(KVSIM_SOURCE_DIR) + "/traces/ops/"; }

op_trace parse(const std::string & text) {
    std::istringstream in(text);
    return parse_op_trace(in, "t.csv");
}

// Rows compared field by field; `line` is not part of the round trip.
void check_same_rows(const op_row & a, const op_row & b) {
    CHECK(a.op == b.op);
    CHECK(a.batch == b.batch);
    CHECK(a.seqs == b.seqs);
    CHECK(a.n_tokens == b.n_tokens);
    CHECK(a.p0 == b.p0);
    CHECK(a.has_p0 == b.has_p0);
    CHECK(a.p1 == b.p1);
    CHECK(a.delta == b.delta);
    CHECK(a.seq_dst == b.seq_dst);
}

void check_same_trace(const op_trace & a, const op_trace & b) {
    REQUIRE(a.groups.size() == b.groups.size());
    for (size_t g = 0; g < a.groups.size(); ++g) {
        CHECK(a.groups[g].op == b.groups[g].op);
        REQUIRE(a.groups[g].rows.size() == b.groups[g].rows.size());
        for (size_t r = 0; r < a.groups[g].rows.size(); ++r) check_same_rows(a.groups[g].rows[r], b.groups[g].rows[r]);
    }
}

op_trace round_trip(const op_trace & t) {
    std::ostringstream out;
    write_op_trace(out, t);
    return parse(out.str());
}

}  // namespace

TEST_CASE("op trace: two-sequence interleave, exact groups and rows") {
    const op_trace t = read_op_trace(ops_dir() + "two_seq_interleave.csv");
    CHECK(t.path == ops_dir() + "two_seq_interleave.csv");
    REQUIRE(t.groups.size() == 10);
    const auto & g0 = t.groups[0];
    CHECK(g0.op == op_kind::decode);
    CHECK(g0.line == 2);
    REQUIRE(g0.rows.size() == 1);
    CHECK(g0.rows[0].seqs == std::vector<llama_seq_id>{0});
    CHECK(g0.rows[0].n_tokens == 8);
    CHECK_FALSE(g0.rows[0].has_p0);
    CHECK(g0.rows[0].p0 == -1);
    // rows 6-7: one llama_decode call for two sequences
    const auto & g4 = t.groups[4];
    CHECK(g4.line == 6);
    REQUIRE(g4.rows.size() == 2);
    CHECK(g4.rows[0].seqs == std::vector<llama_seq_id>{0});
    CHECK(g4.rows[1].seqs == std::vector<llama_seq_id>{1});
    CHECK(g4.rows[1].line == 7);
    const auto & rm = t.groups[5];
    CHECK(rm.op == op_kind::rm);
    CHECK(rm.line == 8);
    REQUIRE(rm.rows.size() == 1);
    CHECK(rm.rows[0].seqs == std::vector<llama_seq_id>{0});
    CHECK(rm.rows[0].p0 == 4);
    CHECK(rm.rows[0].p1 == 10);
    const auto & rm_all = t.groups[8].rows[0];
    CHECK(rm_all.op == op_kind::rm);
    CHECK(rm_all.seqs == std::vector<llama_seq_id>{1});
    CHECK(rm_all.p0 == -1);
    CHECK(rm_all.p1 == -1);
    CHECK(t.groups[9].rows[0].n_tokens == 20);
}

TEST_CASE("op trace: multi-sequence batch, shared tokens and explicit p0") {
    const op_trace t = read_op_trace(ops_dir() + "multi_seq_batch.csv");
    REQUIRE(t.groups.size() == 4);
    CHECK(t.groups[0].rows[0].seqs == std::vector<llama_seq_id>{0, 1, 2});
    CHECK(t.groups[0].rows[0].n_tokens == 8);
    REQUIRE(t.groups[1].rows.size() == 3);
    CHECK(t.groups[1].rows[2].seqs == std::vector<llama_seq_id>{2});
    CHECK(t.groups[1].rows[2].n_tokens == 6);
    CHECK(t.groups[2].rows[0].seqs == std::vector<llama_seq_id>{1, 2});
    REQUIRE(t.groups[3].rows.size() == 2);
    CHECK(t.groups[3].rows[0].has_p0);
    CHECK(t.groups[3].rows[0].p0 == 20);
    CHECK_FALSE(t.groups[3].rows[1].has_p0);
}

TEST_CASE("op trace: context shift, cp/keep, div, rm -1 and clear") {
    const op_trace cs = read_op_trace(ops_dir() + "context_shift.csv");
    REQUIRE(cs.groups.size() == 7);
    const op_row & add = cs.groups[2].rows[0];
    CHECK(add.op == op_kind::add);
    CHECK(add.p0 == 20);
    CHECK(add.p1 == -1);
    CHECK(add.delta == -16);

    const op_trace ck = read_op_trace(ops_dir() + "cp_keep_share.csv");
    REQUIRE(ck.groups.size() == 7);
    const op_row & cp = ck.groups[1].rows[0];
    CHECK(cp.op == op_kind::cp);
    CHECK(cp.seqs == std::vector<llama_seq_id>{0});
    CHECK(cp.seq_dst == 1);
    CHECK(ck.groups[2].rows[0].seq_dst == 2);
    CHECK(ck.groups[3].rows.size() == 2);
    CHECK(ck.groups[5].op == op_kind::keep);
    CHECK(ck.groups[5].rows[0].seqs == std::vector<llama_seq_id>{1});

    const op_trace dv = read_op_trace(ops_dir() + "div_positions.csv");
    REQUIRE(dv.groups.size() == 5);
    CHECK(dv.groups[1].rows[0].delta == 2);
    CHECK(dv.groups[1].rows[0].p0 == 8);
    CHECK(dv.groups[3].rows[0].delta == 4);
    CHECK(dv.groups[3].rows[0].p0 == -1);  // empty = open end
    CHECK(dv.groups[3].rows[0].p1 == -1);

    const op_trace rc = read_op_trace(ops_dir() + "rm_all_clear.csv");
    REQUIRE(rc.groups.size() == 6);
    CHECK(rc.groups[2].rows[0].seqs == std::vector<llama_seq_id>{-1});
    CHECK(rc.groups[2].rows[0].p0 == 6);
    CHECK(rc.groups[3].rows.size() == 2);
    CHECK(rc.groups[4].op == op_kind::clear);
    CHECK(rc.groups[4].rows[0].seqs.empty());

    const op_trace ff = read_op_trace(ops_dir() + "fill_to_failure.csv");
    CHECK(ff.groups.size() == 15);  // the single-token decodes have distinct labels
}

TEST_CASE("op trace: grouping follows csv2script.py") {
    // same label split by another op: two calls; empty labels group like any other label
    const op_trace t = parse(k_header + "a,decode,0,1,,,,\n,keep,0,,,,,\na,decode,0,1,,,,\n,decode,0,2,,,,\n,decode,1,2,,,,\nb,decode,0,1,,,,\n");
    REQUIRE(t.groups.size() == 5);
    CHECK(t.groups[2].rows.size() == 1);
    CHECK(t.groups[3].rows.size() == 2);
    CHECK(t.groups[3].line == 5);
    CHECK(t.groups[4].rows.size() == 1);
}

TEST_CASE("op trace: lenient forms csv2script.py accepts") {
    // spaces around fields and seq ids, quoted fields, blank lines, negative bounds = open,
    // negative decode p0 = next position, rm with empty seq = all sequences
    const op_trace t = parse(k_header + " 1 , decode , 0 ; 1 , 4 , -1 ,,,\n\n\"2\",decode,\"3\",1,,,,\n,rm,,,-7,-2,,\n");
    REQUIRE(t.groups.size() == 3);
    CHECK(t.groups[0].rows[0].batch == "1");
    CHECK(t.groups[0].rows[0].seqs == std::vector<llama_seq_id>{0, 1});
    CHECK_FALSE(t.groups[0].rows[0].has_p0);
    CHECK(t.groups[1].line == 4);
    CHECK(t.groups[1].rows[0].seqs == std::vector<llama_seq_id>{3});
    CHECK(t.groups[2].rows[0].seqs == std::vector<llama_seq_id>{-1});
    CHECK(t.groups[2].rows[0].p0 == -1);
    CHECK(t.groups[2].rows[0].p1 == -1);
}

TEST_CASE("op trace: decode seq ids beyond n_seq_max are llama_decode's error, not the file's") {
    // tests/golden/u_invalid.csv relies on this: llama_batch_allocr::init rejects the batch (rc -1)
    const op_trace t = parse(k_header + "1,decode,256,4,0,,,\n2,decode,0;1000,1,,,,\n");
    REQUIRE(t.groups.size() == 2);
    CHECK(t.groups[0].rows[0].seqs == std::vector<llama_seq_id>{256});
    CHECK(t.groups[1].rows[0].seqs == std::vector<llama_seq_id>{0, 1000});
}

TEST_CASE("op trace: CRLF and UTF-8 BOM are stripped") {
    const op_trace a = read_op_trace(std::string(KVSIM_SOURCE_DIR) + "/tests/data/trace/op_crlf_bom.csv");
    const op_trace b = parse(k_header + "1,decode,0;1,8,,,,\n,rm,0,,4,10,,\n\n2,decode,1,3,,,,\n,cp,1,,-1,-1,,2\n");
    check_same_trace(a, b);
    CHECK(a.groups[3].line == 6);
    CHECK(a.groups[3].rows[0].seq_dst == 2);
}

TEST_CASE("op trace: write -> parse round trip") {
    // the shipped traces and the oracle-checked golden scenarios (another suite's data)
    size_t n_files = 0;
    for (const std::string & dir : {ops_dir(), std::string(KVSIM_SOURCE_DIR) + "/tests/golden/"}) {
        if (!std::filesystem::is_directory(dir)) continue;
        for (const auto & e : std::filesystem::directory_iterator(dir)) {
            if (e.path().extension() != ".csv") continue;
            CAPTURE(e.path().string());
            const op_trace t = read_op_trace(e.path().string());
            check_same_trace(t, round_trip(t));
            ++n_files;
        }
    }
    CHECK(n_files >= 7);
    op_trace t;
    op_row d;
    d.batch = "x,\"y\"";  // needs quoting
    d.seqs = {4, 255};
    d.n_tokens = 3;
    d.p0 = 7;
    d.has_p0 = true;
    op_row dv;
    dv.op = op_kind::div;
    dv.seqs = {2};
    dv.p0 = 1;
    dv.delta = 3;
    t.groups = {{op_kind::decode, {d}, 0}, {op_kind::div, {dv}, 0}};
    const op_trace back = round_trip(t);
    check_same_trace(t, back);
    CHECK(back.groups[0].rows[0].batch == "x,\"y\"");
}

TEST_CASE("op trace: writer refuses groups that would merge on reading") {
    op_row d;
    d.batch = "1";
    d.seqs = {0};
    d.n_tokens = 1;
    op_trace t;
    t.groups = {{op_kind::decode, {d}, 0}, {op_kind::decode, {d}, 0}};
    std::ostringstream out;
    CHECK_THROWS_AS(write_op_trace(out, t), std::invalid_argument);
}

TEST_CASE("op trace: looks_like_op_trace") {
    CHECK(looks_like_op_trace("batch,op,seq,n_tokens,p0,p1,delta,seq_dst"));
    CHECK(looks_like_op_trace("\xEF\xBB\xBF" "batch,op,seq,n_tokens,p0,p1,delta,seq_dst\r\n"));
    CHECK_FALSE(looks_like_op_trace("TIMESTAMP,ContextTokens,GeneratedTokens"));
    CHECK_FALSE(looks_like_op_trace("batch,op,seq,n_tokens,p0,p1,delta"));
    CHECK_FALSE(looks_like_op_trace(""));
}

TEST_CASE("op trace: bad input names file, line and value") {
    struct bad_case {
        std::string text;
        long line;
        std::string value;
        std::string why;  // substring of the message
    };
    const std::string h = k_header;
    const bad_case cases[] = {
        {"", 0, "", "empty file"},
        {"\n  \n", 0, "", "empty file"},
        {h, 1, "", "header only"},
        {"batch,op,seq,n_tokens,p0,p1,delta\n", 1, "batch,op,seq,n_tokens,p0,p1,delta", "missing column 'seq_dst'"},
        {"batch,op,seq,n_tokens,p0,p1,delta,seq_dst,x\n", 1, "x", "extra column"},
        {"batch,seq,op,n_tokens,p0,p1,delta,seq_dst\n", 1, "seq", "column 2 should be 'op'"},
        {h + "1,decode,0,4,,,\n", 2, "1,decode,0,4,,,", "missing column 'seq_dst'"},
        {h + "1,decode,0,4,,,,,\n", 2, "1,decode,0,4,,,,,", "extra field"},
        {h + "1,decode,0,4,,,,\n1,decode,0,abc,,,,\n", 3, "abc", "not an integer"},
        {h + "1,decode,0,4x,,,,\n", 2, "4x", "not an integer"},
        {h + "1,decode,0,2147483648,,,,\n", 2, "2147483648", "32-bit"},
        {h + ",rm,0,,0,-2147483649,,\n", 2, "-2147483649", "32-bit"},
        {h + "1,decode,0,-3,,,,\n", 2, "-3", "negative"},
        {h + "1,decode,0,0,,,,\n", 2, "0", "must be > 0"},
        {h + "1,decode,0,,,,,\n", 2, "", "decode needs n_tokens"},
        {h + "1,decode,,4,,,,\n", 2, "", "at least one seq"},
        {h + "1,prefill,0,4,,,,\n", 2, "prefill", "unknown op"},
        {h + ",keep,256,,,,,\n", 2, "256", "out of range"},
        {h + ",add,999,,,,1,\n", 2, "999", "out of range"},
        {h + ",rm,-2,,,,,\n", 2, "-2", "out of range"},
        {h + "1,decode,0;0,4,,,,\n", 2, "0;0", "listed twice"},
        {h + "1,decode,0;x,4,,,,\n", 2, "x", "not an integer"},
        {h + ",keep,-1,,,,,\n", 2, "-1", "only allowed for rm"},
        {h + ",add,,,0,5,1,\n", 2, "", "only allowed for rm"},
        {h + ",rm,0;1,,,,,\n", 2, "0;1", "only decode rows"},
        {h + ",div,0,,0,8,0,\n", 2, "0", "delta must be > 0"},
        {h + ",div,0,,0,8,-2,\n", 2, "-2", "delta must be > 0"},
        {h + ",div,0,,0,8,,\n", 2, "", "div needs delta"},
        {h + ",add,0,,0,8,,\n", 2, "", "add needs delta"},
        {h + ",cp,0,,,,,\n", 2, "", "cp needs seq_dst"},
        {h + ",cp,0,,,,,-1\n", 2, "-1", "seq_dst out of range"},
        {h + ",cp,0,,,,,256\n", 2, "256", "seq_dst out of range"},
        {h + ",rm,0,,1.5,,,\n", 2, "1.5", "not an integer"},
        {h + "\"1,decode,0,1,,,,\n", 2, "\"1,decode,0,1,,,,", "unterminated quoted field"},
    };
    for (const auto & c : cases) {
        CAPTURE(c.text);
        try {
            parse(c.text);
            FAIL("no input_error");
        } catch (const input_error & e) {
            CHECK(e.file() == "t.csv");
            CHECK(e.line() == c.line);
            CHECK(e.value() == c.value);
            CHECK(std::string(e.what()).find(c.why) != std::string::npos);
            CHECK(std::string(e.what()).rfind("t.csv", 0) == 0);
        }
    }
}

TEST_CASE("op trace: missing file") {
    try {
        read_op_trace("no/such/trace.csv");
        FAIL("no input_error");
    } catch (const input_error & e) {
        CHECK(e.file() == "no/such/trace.csv");
        CHECK(e.line() == 0);
    }
}
