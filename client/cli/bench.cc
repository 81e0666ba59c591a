// `attnscope bench`: load from --clients threads sharing the client's channel (HTTP/2 carries
// their calls side by side), the measure text-embeddings-inference's and Triton's load tools give:
// throughput, latency percentiles and errors by code.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "common/status_macros.h"

namespace attnscope::cli {
namespace {

// The RPCs a bench calls, indexed as BenchCall::rpc.
constexpr const char* kRpcs[] = {"GetAttention", "Encode", "CrossAttention"};

struct Flags {
  std::string model;
  std::vector<std::string> texts;
  std::optional<std::string> query;
  std::vector<std::string> documents;
  int64_t clients = 8;
  absl::Duration duration = absl::Seconds(30);
  // 0: until --duration has passed.
  int64_t requests = 0;
  std::string rpc = "mixed";
  // Indices into kRpcs, taken in turn.
  std::vector<int> rpcs = {0, 1, 2};
};

// What one bench caller saw of one call.
struct BenchCall {
  int rpc = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  double milliseconds = 0;
};

absl::StatusOr<int64_t> ParseClients(const std::string& text) {
  ATTNSCOPE_ASSIGN_OR_RETURN(int64_t clients, ParseInt("--clients", text));
  if (clients < 1 || clients > 4096) {
    return UsageError(absl::StrCat("--clients: expected 1 to 4096 callers, got ", clients));
  }
  return clients;
}

absl::StatusOr<int64_t> ParseRequests(const std::string& text) {
  ATTNSCOPE_ASSIGN_OR_RETURN(int64_t requests, ParseInt("--requests", text));
  if (requests < 1)
    return UsageError(absl::StrCat("--requests: expected 1 or more, got ", requests));
  return requests;
}

absl::StatusOr<std::vector<int>> ParseRpc(const std::string& text) {
  if (text == "mixed") return std::vector<int>{0, 1, 2};
  if (text == "attention") return std::vector<int>{0};
  if (text == "encode") return std::vector<int>{1};
  if (text == "cross") return std::vector<int>{2};
  return UsageError(
      absl::StrCat("--rpc: expected mixed, attention, encode or cross, got '", text, "'"));
}

absl::StatusOr<Output> RunBench(const Flags& flags, const CommandContext& context) {
  Client& client = context.client;
  const CallOptions& call = context.call;
  const std::string text = flags.texts.empty() ? "Tôi yêu Việt Nam quá" : flags.texts.back();
  v1::GetAttentionRequest attention;
  attention.set_model(flags.model);
  attention.set_text(text);
  v1::EncodeRequest encode;
  encode.set_model(flags.model);
  encode.add_inputs()->set_text(text);
  v1::CrossAttentionRequest cross;
  cross.set_model(flags.model);
  cross.set_query(flags.query.value_or("Việt Nam"));
  std::vector<std::string> documents = flags.documents;
  if (documents.empty()) documents = {text};
  for (const std::string& document : documents) cross.add_documents(document);

  const int64_t clients = flags.clients;
  const int64_t requests = flags.requests;
  const std::vector<int>& rpcs = flags.rpcs;
  std::atomic<int64_t> issued{0};
  const absl::Time start = absl::Now();
  const absl::Time end = start + flags.duration;
  std::vector<std::vector<BenchCall>> seen(clients);
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      for (;;) {
        const int64_t index = issued.fetch_add(1);
        if (requests > 0 ? index >= requests : absl::Now() >= end) return;
        BenchCall done;
        done.rpc = rpcs[index % rpcs.size()];
        const absl::Time begin = absl::Now();
        absl::Status status;
        if (done.rpc == 0) {
          status = client.GetAttention(attention, call).status();
        } else if (done.rpc == 1) {
          status = client.Encode(encode, call).status();
        } else {
          status = client.CrossAttention(cross, call).status();
        }
        done.milliseconds = absl::ToDoubleMilliseconds(absl::Now() - begin);
        done.code = status.code();
        seen[i].push_back(done);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);

  std::vector<double> latencies;
  std::map<std::string, int64_t> errors;
  std::map<std::string, int64_t> calls;
  for (const std::vector<BenchCall>& caller : seen) {
    for (const BenchCall& done : caller) {
      latencies.push_back(done.milliseconds);
      ++calls[kRpcs[done.rpc]];
      if (done.code != absl::StatusCode::kOk) ++errors[absl::StatusCodeToString(done.code)];
    }
  }
  std::sort(latencies.begin(), latencies.end());
  // Nearest-rank percentiles.
  auto percentile = [&latencies](double p) {
    if (latencies.empty()) return 0.0;
    const size_t rank = static_cast<size_t>(std::ceil(p / 100 * latencies.size()));
    return latencies[std::max<size_t>(rank, 1) - 1];
  };
  return JsonOutput({{"clients", clients},
                     {"rpc", flags.rpc},
                     {"seconds", seconds},
                     {"calls", latencies.size()},
                     {"calls_per_second", latencies.size() / seconds},
                     {"calls_by_rpc", calls},
                     {"latency_ms",
                      {{"p50", percentile(50)},
                       {"p90", percentile(90)},
                       {"p99", percentile(99)},
                       {"max", latencies.empty() ? 0.0 : latencies.back()}}},
                     {"errors", errors}});
}

}  // namespace

Command AddBenchCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "bench",
      "load: concurrent clients calling GetAttention, Encode and CrossAttention, each calling "
      "again as soon as it is answered. Prints calls/s, latency p50/p90/p99/max in ms and errors "
      "by code as JSON");
  auto flags = std::make_shared<Flags>();
  AddModelFlag(*command, &flags->model);
  command->option_defaults()->group("Bench");
  AddRepeatableFlag(*command, "--text", "T",
                    "the text of every call (default \"Tôi yêu Việt Nam quá\"; the last one given)",
                    &flags->texts);
  AddStringFlag(*command, "--query", "Q", "CrossAttention's query (default \"Việt Nam\")",
                &flags->query);
  AddRepeatableFlag(*command, "--document", "D",
                    "CrossAttention's documents, repeatable (default the text)", &flags->documents);
  AddParsedFlag(*command, "--clients", "N", "callers at once (default 8)", &flags->clients,
                ParseClients);
  AddParsedFlag(*command, "--duration", "DURATION", "how long to call (default 30s)",
                &flags->duration,
                [](const std::string& text) { return ParseDuration("--duration", text); });
  AddParsedFlag(*command, "--requests", "N", "stop after N calls in all instead", &flags->requests,
                ParseRequests);
  AddValueFlag(*command, "--rpc", "mixed|attention|encode|cross",
               "the RPC to call; mixed takes turns (default mixed)",
               [flags](const std::vector<std::string>& values) {
                 const std::string& rpc = OnlyValue("--rpc", values);
                 absl::StatusOr<std::vector<int>> rpcs = ParseRpc(rpc);
                 RefuseIfError(rpcs.status());
                 flags->rpc = rpc;
                 flags->rpcs = *std::move(rpcs);
               });
  return {command, [flags](const CommandContext& context) { return RunBench(*flags, context); }};
}

}  // namespace attnscope::cli
