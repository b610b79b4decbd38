// Request-level workload traces: Azure LLM inference 2023, Mooncake FAST'25, BurstGPT.
// Formats, units and error rules: docs/trace-formats.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvsim {

enum class request_format { azure, mooncake, burstgpt };

// One request. arrival_s: seconds after the first request of the trace (first = 0);
// n_prompt > 0 and n_gen >= 0 are token counts; hash_ids (Mooncake only, else empty) are the
// ids of the request's consecutive 512-token prompt blocks, equal ids = shareable prefix KV.
// `line` is the 1-based source line. n_predict (Mooncake form only, optional): the generation limit the request
// sends, -1 = none (llama-server's -n then applies); absent = the request's limit is n_gen. n_gen is then the
// length it generates unlimited (where it would stop by itself). seed (Mooncake form only, optional): the request's
// sampling seed, which seeds llama-server's synthetic draft acceptance; absent = its 0-based index in the trace.
// n_cmpl (Mooncake form only, optional, default 1): completions the request asks for (llama-server's n_cmpl: one
// slot per completion, the extra ones copying the first one's cells once its prompt is processed).
struct request {
    long line = 0;
    double arrival_s = 0.0;
    int32_t n_prompt = 0;
    int32_t n_gen = 0;
    std::vector<uint64_t> hash_ids;
    std::optional<int32_t> n_predict;
    std::optional<uint32_t> seed;
    int32_t n_cmpl = 1;
};

struct request_trace {
    std::string path;
    request_format format = request_format::azure;
    std::vector<request> requests;  // file order, arrival_s non-decreasing
};

// Read a request trace; the format is detected from the first non-blank line unless given.
// A UTF-8 BOM and CRLF line ends are stripped, blank lines skipped.
// Errors: input_error(path, line, value, why) for an undetectable format, a missing/extra
// column, a non-number, a negative or int32-overflowing token count, n_prompt == 0, a bad
// timestamp, an arrival earlier than the previous row's or too far after the first one to be a
// finite number of seconds, a bad JSON line or missing/mistyped
// JSON key, an empty file or a header without rows; input_error(path, 0, ...) when the file
// cannot be opened.
// Sources: Azure/AzurePublicDataset AzureLLMInferenceDataset2023.md (Splitwise, ISCA'24);
// kvcache-ai/Mooncake FAST25-release/README.md; HPMLL/BurstGPT README (columns).
request_trace read_request_trace(const std::string & path, std::optional<request_format> fmt = {});

// Format from a file's first line (BOM/CR tolerated): the Azure or BurstGPT CSV header, or a
// line starting with '{' (Mooncake JSONL). nullopt otherwise.
std::optional<request_format> detect_request_format(const std::string & first_line);

// "azure" | "mooncake" | "burstgpt"; throws std::invalid_argument otherwise.
request_format parse_request_format(const std::string & name);
const char * request_format_name(request_format f);

// Nanoseconds since 1970-01-01 00:00:00 (UTC, proleptic Gregorian, no leap seconds) of an Azure
// trace timestamp "YYYY-MM-DD HH:MM:SS[.fffffff]" (1-9 fractional digits), or nullopt when the
// text is not such a timestamp, names an invalid date/time, or lies outside the int64 range
// (1677-09-21 00:12:43.145224192 .. 2262-04-11 23:47:16.854775807). Exact: no floating
// point, no time zones (the trace has none).
std::optional<int64_t> parse_azure_timestamp_ns(const std::string & text);

// Replays the trace's load `rate_scale` times as fast: every arrival_s becomes arrival_s /
// rate_scale (2 = twice the request rate, 0.5 = half), so order, prompt and output lengths and the
// shape of the arrivals (bursts, gaps) stay those of the trace. The reverse of vidur's
// TraceRequestIntervalGenerator time_scale_factor (which multiplies the intervals). Throws
// usage_error naming rate_scale for a value that is not a finite number > 0, or one that would
// scale an arrival past a finite double (then no arrival changes).
void scale_arrival_rate(request_trace & t, double rate_scale);

// Days from 1970-01-01 to the proleptic Gregorian date y-m-d (negative before 1970).
// Algorithm: H. Hinnant, "chrono-Compatible Low-Level Date Algorithms", days_from_civil.
int64_t days_from_civil(int64_t y, unsigned m, unsigned d);

}  // namespace kvsim
