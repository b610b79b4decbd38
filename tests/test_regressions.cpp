// Inputs the fuzzers (tests/fuzz, docs/reliability.md) and the bad-input run found to crash, hang,
// hit undefined behaviour or break a contract, kept as tests once fixed. Each case names who found
// it and what used to happen.
#include "trace/convert.h"
#include "trace/op_trace.h"
#include "trace/request_trace.h"
#include "trace/text_lines.h"
#include "util/atomic_file.h"
#include "core/errors.h"
#include "util/interrupt.h"
#include "util/read_file.h"

#include <doctest/doctest.h>

#include <csignal>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>

using namespace kvsim;

namespace {

// Writes `text` to a scratch file under the build directory (the request readers take a path).
std::string scratch(const std::string & name, const std::string & text) {
    const auto dir = std::filesystem::path(KVSIM_BINARY_DIR) / "test_regressions_tmp";
    std::filesystem::create_directories(dir);
    const auto path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

// The input_error a request trace raises, or a failed check when it raises none.
input_error request_error(const std::string & name, const std::string & text) {
    try {
        read_request_trace(scratch(name, text));
    } catch (const input_error & e) {
        return e;
    }
    FAIL("no input_error for " << name);
    return input_error("", 0, "", "");
}

const std::string k_azure_header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
const std::string k_burstgpt_header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";

}  // namespace

// fuzz_azure: a 4-digit year outside 1677..2262 overflowed int64 nanoseconds in
// parse_azure_timestamp_ns (signed overflow, UBSan: request_trace.cpp, "9999-01-01 00:00:00").
TEST_CASE("regression: Azure timestamps outside the int64 nanosecond range are rejected, the bounds are exact") {
    CHECK(parse_azure_timestamp_ns("2262-04-11 23:47:16.854775807") == std::numeric_limits<int64_t>::max());
    CHECK_FALSE(parse_azure_timestamp_ns("2262-04-11 23:47:16.854775808").has_value());
    CHECK(parse_azure_timestamp_ns("1677-09-21 00:12:43.145224192") == std::numeric_limits<int64_t>::min());
    CHECK_FALSE(parse_azure_timestamp_ns("1677-09-21 00:12:43.145224191").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("9999-12-31 23:59:59.999999999").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("0000-01-01 00:00:00").has_value());

    const input_error e = request_error("azure_year.csv", k_azure_header + "2023-11-16 18:15:46,10,1\n9999-01-01 00:00:00,10,1\n");
    CHECK(e.line() == 3);
    CHECK(e.value() == "9999-01-01 00:00:00");
}

// fuzz_azure: two valid timestamps more than 292 years apart overflowed `t - first` in int64
// nanoseconds (arrival_clock::relative_s). The span is exact in uint64 and is now accepted.
TEST_CASE("regression: an Azure trace spanning centuries gives the exact arrival") {
    const request_trace t = read_request_trace(scratch("azure_span.csv", k_azure_header + "1700-01-01 00:00:00,10,1\n2200-01-01 00:00:00,10,1\n"));
    REQUIRE(t.requests.size() == 2);
    CHECK(t.requests[0].arrival_s == 0.0);
    CHECK(t.requests[1].arrival_s == (double) (days_from_civil(2200, 1, 1) - days_from_civil(1700, 1, 1)) * 86400.0);
}

// fuzz_burstgpt / fuzz_mooncake: finite timestamps whose difference is not finite gave an
// arrival of +inf (request_trace promises finite arrivals; the scheduler's clock broke).
TEST_CASE("regression: a timestamp span that overflows a double is an input error") {
    const input_error b = request_error("burstgpt_span.csv", k_burstgpt_header + "-1e308,GPT-4,5,5,10,API log\n1e308,GPT-4,5,5,10,API log\n");
    CHECK(b.line() == 3);
    CHECK(b.value() == "1e308");
    const input_error m = request_error(
        "mooncake_span.jsonl",
        "{\"timestamp\": -1.7e308, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": []}\n"
        "{\"timestamp\": 1.7e308, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": []}\n");
    CHECK(m.line() == 2);
}

TEST_CASE("a NUL byte inside a trace line is refused with its line, not silently cut") {
    const std::string path = (std::filesystem::temp_directory_path() / "kvsim_nul.csv").string();
    {
        std::ofstream f(path, std::ios::binary);
        f << "batch,op,seq,n_tokens,p0,p1,delta,seq_dst\n1,decode,0,8,,,,\n1,decode,0,8,,,,";
        f.put('\0');
        f << "junk\n";
    }
    try {
        (void) read_op_trace(path);
        FAIL("no error for a NUL byte");
    } catch (const input_error & e) {
        CHECK(e.line() == 3);
        CHECK(std::string(e.what()).find("NUL") != std::string::npos);
    }
    std::filesystem::remove(path);
}

// ---- bad-input run (docs/reliability.md): output paths that are links, devices or pipes ----

namespace {

namespace fs = std::filesystem;

// A fresh scratch directory under the build directory.
fs::path scratch_dir(const std::string & name) {
    const fs::path dir = fs::path(KVSIM_BINARY_DIR) / "test_regressions_tmp" / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

std::string slurp(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_atomically(const std::string & path, const std::string & text) {
    atomic_file f(path);
    f.out() << text;
    f.commit();
}

}  // namespace

TEST_CASE("atomic_file through a chain of symlinks replaces the final target and keeps the links") {
    const fs::path d = scratch_dir("links");
    fs::create_directories(d / "sub");
    std::ofstream(d / "sub/real.txt") << "old";
    fs::create_symlink("sub/real.txt", d / "a");   // relative, resolved against the link's directory
    fs::create_symlink(d / "a", d / "b");          // absolute, to another link
    write_atomically((d / "b").string(), "new");
    CHECK(fs::is_symlink(d / "a"));
    CHECK(fs::is_symlink(d / "b"));
    CHECK(slurp(d / "sub/real.txt") == "new");
    CHECK(std::distance(fs::directory_iterator(d / "sub"), {}) == 1);   // no temporary file left

    fs::create_symlink("sub/created.txt", d / "dangling");
    write_atomically((d / "dangling").string(), "made");
    CHECK(fs::is_symlink(d / "dangling"));
    CHECK(slurp(d / "sub/created.txt") == "made");

    fs::create_symlink("loop2", d / "loop1");
    fs::create_symlink("loop1", d / "loop2");
    CHECK_THROWS_WITH_AS(atomic_file((d / "loop1").string()), doctest::Contains("too many levels of symbolic links"), usage_error);
    CHECK_THROWS_WITH_AS(atomic_file(d.string()), doctest::Contains("is a directory"), usage_error);
}

// A FIFO that no process writes blocked calibrate, --device and plan merge in open() (hostile-input run,
// 2026-12-03); a pipe with a writer (`<(cat f)`) is still read whole.
TEST_CASE("read_small_file: a FIFO without a writer is one error at once; a pipe with a writer is read") {
    const fs::path d = scratch_dir("small-fifo");
    const std::string fifo = (d / "fifo").string();
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(read_small_file(fifo, "device profile"), doctest::Contains("a FIFO or pipe that no process wrote"), input_error);
    int p[2];
    REQUIRE(pipe(p) == 0);
    REQUIRE(write(p[1], "{}", 2) == 2);
    close(p[1]);
    CHECK(read_small_file("/proc/self/fd/" + std::to_string(p[0]), "device profile") == "{}");
    close(p[0]);
    CHECK_THROWS_WITH_AS(read_small_file((d / "none.json").string(), "device profile"),
                         doctest::Contains("cannot open the device profile: No such file or directory"), input_error);
}

TEST_CASE("atomic_file writes a FIFO, a pipe reached through /proc and /dev/null in place; /dev/full reports ENOSPC") {
    const fs::path d = scratch_dir("nodes");
    const std::string fifo = (d / "fifo").string();
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);   // a reader, so opening for writing does not block
    REQUIRE(reader >= 0);
    {
        atomic_file f(fifo);
        CHECK(f.direct());
        f.out() << "through the fifo";
        f.commit();
    }
    char buf[64] = {};
    CHECK(std::string(buf, (size_t) read(reader, buf, sizeof buf)) == "through the fifo");
    close(reader);
    CHECK(fs::is_fifo(fifo));

    int p[2];
    REQUIRE(pipe(p) == 0);
    {
        atomic_file f("/proc/self/fd/" + std::to_string(p[1]));   // what /dev/stdout resolves to
        CHECK(f.direct());
        f.out() << "through the pipe";
        f.commit();
    }
    close(p[1]);
    CHECK(std::string(buf, (size_t) read(p[0], buf, sizeof buf)) == "through the pipe");
    close(p[0]);

    for (const char * dev : {"/dev/null", "/dev/full"}) {
        atomic_file f(dev);
        REQUIRE(f.direct());   // never commit a rename onto a device
        f.out() << std::string(200000, 'x');   // more than one buffer: the first failed write is what counts
        if (std::string(dev) == "/dev/null") {
            CHECK_NOTHROW(f.commit());
        } else {
            CHECK_THROWS_WITH_AS(f.commit(), "cannot write /dev/full: No space left on device", std::runtime_error);
        }
        CHECK(fs::is_character_file(dev));
    }
    // a kernel file under /proc is no output: refused when opened (exit 2), not after the work at the first write
    CHECK_THROWS_WITH_AS(atomic_file("/proc/version"), "cannot write /proc/version: a /proc file, not an output", usage_error);
    // ... also through a link (hostile check, session 31)
    const fs::path link = scratch_dir("proc_link") / "v.json";
    fs::create_symlink("/proc/version", link);
    CHECK_THROWS_WITH_AS(atomic_file(link.string()), doctest::Contains("a /proc file, not an output"), usage_error);
    CHECK_THROWS_WITH_AS(atomic_file::check(link.string()), doctest::Contains("a /proc file, not an output"), usage_error);
    // check() leaves nothing behind; a valid name of 250 bytes is written (its NAME.tmp-PID was too long)
    const fs::path long_name = link.parent_path() / std::string(250, 'a');
    atomic_file::check(long_name.string());
    CHECK(std::distance(fs::directory_iterator(link.parent_path()), fs::directory_iterator()) == 1);   // the link only
    {
        atomic_file f(long_name.string());
        f.out() << "x";
        f.commit();
    }
    CHECK(fs::file_size(long_name) == 1);
    // two long names in one folder: their temporary names differ (a shared .kvsim.tmp-PID mixed two outputs)
    {
        const fs::path b = link.parent_path() / std::string(250, 'b'), c = link.parent_path() / std::string(250, 'c');
        atomic_file fb(b.string()), fc(c.string());
        fb.out() << "bb";
        fc.out() << "ccc";
        fb.commit();
        fc.commit();
        CHECK(fs::file_size(b) == 2);
        CHECK(fs::file_size(c) == 3);
    }
    // a descriptor that is not open, and one open on a directory: refused up front
    CHECK_THROWS_AS(atomic_file::check("/proc/self/fd/987"), usage_error);
    // a file the shell opened (`-o /dev/stdout > file`) is written at the shell's offset, not over what it holds
    {
        const fs::path f = link.parent_path() / "shell.txt";
        const int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        REQUIRE(fd >= 0);
        REQUIRE(::write(fd, "A", 1) == 1);
        {
            atomic_file a("/proc/self/fd/" + std::to_string(fd));
            a.out() << "B";
            a.commit();
        }
        REQUIRE(::write(fd, "C", 1) == 1);
        ::close(fd);
        std::ifstream in(f);
        CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "ABC");
    }
}

// ---- bad-input run: `kvsim inspect /dev/zero` never finished ----

TEST_CASE("a trace must be a regular file: devices, FIFOs and directories are refused at once") {
    const fs::path d = scratch_dir("trace_nodes");
    const std::string fifo = (d / "fifo").string();
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    for (const std::string & path : {std::string("/dev/zero"), std::string("/dev/urandom"), fifo}) {
        CAPTURE(path);
        CHECK_THROWS_WITH_AS(read_request_trace(path), doctest::Contains("not a regular file"), input_error);
        CHECK_THROWS_WITH_AS(read_op_trace(path), doctest::Contains("not a regular file"), input_error);
        CHECK_THROWS_WITH_AS(read_first_line(path), doctest::Contains("not a regular file"), input_error);
    }
    CHECK_THROWS_WITH_AS(read_request_trace(d.string()), doctest::Contains("is a directory"), input_error);
    CHECK_THROWS_WITH_AS(read_first_line((d / "missing.csv").string()), doctest::Contains("cannot open trace file"), input_error);
}

TEST_CASE("a line longer than 1 MiB is an input error naming the line, from a file or a stream") {
    const std::string header = "batch,op,seq,n_tokens,p0,p1,delta,seq_dst\n";
    const std::string longest(k_max_line_bytes, 'x');
    auto error_of = [](auto && f) -> input_error {
        try {
            f();
        } catch (const input_error & e) {
            return e;
        }
        FAIL("no input_error");
        return input_error("", 0, "", "");
    };
    const std::string no_newlines = scratch("no_newlines.csv", std::string(3 * k_max_line_bytes, 'y'));
    const input_error a = error_of([&] { read_request_trace(no_newlines); });
    CHECK(a.line() == 1);
    CHECK(std::string(a.what()) == no_newlines + ":1: line 1 longer than 1048576 bytes (a binary file, or a file without line ends?)");
    CHECK_THROWS_WITH_AS(read_first_line(no_newlines), doctest::Contains("line 1 longer than 1048576 bytes"), input_error);

    const std::string third = scratch("long_third.csv", header + "1,decode,0,8,,,,\n" + longest + "z\n");
    CHECK(error_of([&] { read_op_trace(third); }).line() == 3);
    std::istringstream in(header + "1,decode,0,8,,,,\n" + longest + "z\n");
    const input_error s = error_of([&] { parse_op_trace(in, "stream.csv"); });
    CHECK(s.line() == 3);
    CHECK(std::string(s.what()).find("longer than 1048576 bytes") != std::string::npos);

    // exactly the limit is still a line (an unknown op, not a length error)
    const std::string at_limit = scratch("at_limit.csv", header + longest + "\n");
    CHECK(std::string(error_of([&] { read_op_trace(at_limit); }).what()).find("longer than") == std::string::npos);
}

// Bad-input run 2 (docs/reliability.md): a value's control bytes were printed raw ('4\r').
TEST_CASE("input_error escapes control bytes in the value, and keeps value() raw") {
    const input_error e("t.csv", 3, std::string("4\r\t\n\x01\x7f\0x", 8) + "\xc3\xa9", "bad");
    CHECK(std::string(e.what()) == "t.csv:3: bad (value '4\\r\\t\\n\\x01\\x7f\\0x\xc3\xa9')");
    CHECK(e.value() == std::string("4\r\t\n\x01\x7f\0x", 8) + "\xc3\xa9");
}

// Hostile check, session 32: bytes that are not well-formed UTF-8 passed through (a lone 0x9B is CSI to a terminal in an
// 8-bit mode); well-formed characters of 2, 3 and 4 bytes still do.
TEST_CASE("escape_controls shows bytes that are not well-formed UTF-8 as \\xNN and keeps characters") {
    CHECK(escape_controls("a\xff\x9b" "b") == "a\\xff\\x9bb");
    CHECK(escape_controls("caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80");
    CHECK(escape_controls("\xc0\xaf") == "\\xc0\\xaf");            // overlong '/'
    CHECK(escape_controls("\xed\xa0\x80") == "\\xed\\xa0\\x80");    // a UTF-16 surrogate
    CHECK(escape_controls("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");   // past U+10FFFF
    CHECK(escape_controls("x\xe2\x82") == "x\\xe2\\x82");            // cut short
    CHECK(escape_controls("\xc2\x9b[31m") == "\\xc2\\x9b[31m");      // C1 CSI, as before
    const std::string once = escape_controls("\x1b\xff\xc3\xa9");
    CHECK(escape_controls(once) == once);                                 // escaping twice changes nothing
}

// Bad-input run 2: SIGHUP (terminal closed) killed a replay with its temporary files left.
TEST_CASE("SIGHUP is a stop request like SIGINT and SIGTERM; SIGPIPE can be ignored") {
    reset_interrupt();
    install_interrupt_handler();
    REQUIRE_FALSE(interrupted());
    std::raise(SIGHUP);
    CHECK(interrupted());
    CHECK(interrupt_signal() == SIGHUP);
    reset_interrupt();
    ignore_sigpipe();
    struct sigaction cur {};
    REQUIRE(sigaction(SIGPIPE, nullptr, &cur) == 0);
    CHECK((cur.sa_handler == SIG_IGN));
    std::raise(SIGPIPE);   // ignored: the test goes on
    CHECK_FALSE(interrupted());
}

// Bad-input run 2: more hash_ids than prompt tokens gave negative block lengths in the prefix
// reuse; a duplicated key was silently read as its last value.
TEST_CASE("Mooncake: more hash_ids than prompt tokens, and duplicated keys, are input errors") {
    const input_error a = request_error("mc_ids.jsonl", "{\"timestamp\": 0, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1,2,3]}\n");
    CHECK(a.line() == 1);
    CHECK(a.value() == "3");
    CHECK(std::string(a.what()).find("input_length 2") != std::string::npos);
    const input_error b = request_error("mc_dup.jsonl", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}\n"
                                        "{\"timestamp\": 1, \"input_length\": 10, \"input_length\": 5000, \"output_length\": 1, \"hash_ids\": [1]}\n");
    CHECK(b.line() == 2);
    CHECK(b.value() == "input_length");
    // as many ids as tokens is fine
    const request_trace ok = read_request_trace(scratch("mc_ok.jsonl", "{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 1, "
                                                                      "\"hash_ids\": [1,2,3]}\n"));
    CHECK(ok.requests.size() == 1);
}

// hostile-input pass (docs/reliability.md, "recovered tree"): a 140 KB Mooncake line of nested arrays crashed
// inspect, replay and convert with SIGSEGV (nlohmann's dump() of the bad value recursed once per level).
TEST_CASE("Mooncake: a value nested 200,000 levels deep is an input error, not a stack overflow") {
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    for (const char * key : {"timestamp", "hash_ids"}) {
        CAPTURE(key);
        std::string line = "{\"timestamp\": 0, \"input_length\": 1300, \"output_length\": 40, \"hash_ids\": [1]}";
        const std::string field = std::string("\"") + key + "\": ";
        const size_t at = line.find(field) + field.size();
        line.replace(at, line.find_first_of(",}", at) - at, key == std::string("hash_ids") ? "[" + deep + "]" : deep);
        const input_error e = request_error("mc_deep.jsonl", line + "\n");
        CHECK(e.line() == 1);
        CHECK(std::string(e.what()).find("nested deeper than 64 levels") != std::string::npos);   // stopped while parsing
        CHECK(e.value().size() < 200);
    }
}

// hostile-input pass: `kvsim convert A A` replaced the trace with its conversion (exit 0).
TEST_CASE("kvsim convert refuses an output that is the input, by any name") {
    const std::string in = scratch("conv_same.csv", k_azure_header + "2023-11-16 18:15:46,10,1\n");
    std::stringstream warn;
    CHECK_THROWS_WITH_AS(convert_trace(in, in, "burstgpt", "auto", warn), doctest::Contains("is the input trace"), usage_error);
    const std::string link = (std::filesystem::path(in).parent_path() / "conv_link.csv").string();
    std::filesystem::remove(link);
    std::filesystem::create_symlink(in, link);
    CHECK_THROWS_AS(convert_trace(in, link, "burstgpt", "auto", warn), usage_error);
    CHECK(read_request_trace(in).requests.size() == 1);   // still the Azure trace
}
