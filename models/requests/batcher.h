// Dynamic batching of forward passes: calls that arrive while the model is busy wait in one queue,
// and those for the same model run together as one right-padded batch (GetAttention, Encode and
// CrossAttention alike; pre-softmax scores only with calls that also ask for them).
// Each caller gets back only its own rows. Modelled on Triton's dynamic batcher (preferred batch
// size, max_queue_delay_microseconds) and text-embeddings-inference's token budget
// (max_batch_tokens).
//
// Why one thread runs every pass: LibTorch's OpenMP thread team and glibc's malloc arena belong to
// the thread that runs a forward pass, and gRPC's synchronous server hands successive calls to
// different threads of its pool. A BERT-base GetAttention forward run that way measured about 15%
// slower than the same forward in a loop on one thread (bench/service_bench). Concurrent passes
// would gain nothing either: each already uses every intra-op thread. Batching is what turns many
// small concurrent calls into fewer, larger matrix products. (Triton serves a model instance the
// same way: one execution thread.)
//
// Calls share a pass only when padding them costs little: up to 64 tokens any lengths do, beyond
// that the longest input may be at most twice the shortest call's longest (a 5-token call padded to
// 512 would cost more than a pass of its own).
//
// Turns go round the clients: the next pass is led by the oldest call of the client whose calls
// were served the longest ago, so that one client keeping many calls queued does not hold every
// other client's call behind all of them (32 queued Encodes of a full pass, 0.27 s each, held
// another client's 2-token call 8.7 s). Calls of any client then fill the pass as before.
//
// Padding never leaks: padded keys get exactly zero attention (see ForwardOutput), and a batch
// row's real positions are computed from its own tokens only, so a batched result equals the same
// call run alone up to float32 rounding of differently shaped matrix products.
#ifndef ATTNSCOPE_MODELS_REQUESTS_BATCHER_H_
#define ATTNSCOPE_MODELS_REQUESTS_BATCHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "models/engine.h"

namespace attnscope {

// Called while the call waits in the queue, before the forward pass (when the call's turn comes)
// and after each layer, with a
// description of the moment ("after layer 3"); a non-OK status (DeadlineExceeded, Cancelled)
// stops the call. Empty = never stops.
using CallCheck = std::function<absl::Status(absl::string_view when)>;

// Events of the batcher, for metrics. Called on the batcher's thread, or on a caller's when its
// call leaves the queue before its pass; must be thread-safe.
class BatchObserver {
 public:
  virtual ~BatchObserver() = default;
  // A call for `model` waited `seconds` between Run and the start of its forward pass (or until
  // it left the queue, stopped by its check).
  virtual void OnQueueWait(const std::string& model, double seconds) = 0;
  // One forward pass of `model` over `sequences` inputs right-padded to `padded_tokens` in all
  // (sequences x longest), made of `calls` calls, took `seconds`.
  virtual void OnForward(const std::string& model, int64_t calls, int64_t sequences,
                         int64_t padded_tokens, double seconds) = 0;
};

class ForwardBatcher {
 public:
  struct Options {
    // Most inputs (sequences) in one forward pass; 1 turns batching off. A call with more inputs
    // than this (an Encode of many texts) still runs, alone.
    int max_batch_size = 32;
    // Most padded tokens (inputs x longest input) in one forward pass; a call over it runs alone
    // (Encode and CrossAttention hand over their inputs in groups within it or their own bound).
    // Bounds the memory of a pass: its attentions grow with inputs x tokens^2.
    int64_t max_batch_tokens = 8192;
    // How long the oldest waiting call may wait for more calls to fill its batch before its pass
    // starts. 0 (the default) adds no latency: a pass takes whatever queued while the previous one
    // ran, which under load is exactly when batching pays.
    absl::Duration max_queue_delay = absl::ZeroDuration();
  };

  // `observer` may be null; it must outlive the batcher. Starts the thread.
  ForwardBatcher(const Options& options, BatchObserver* observer);
  // Finishes the calls already queued, then joins the thread.
  ~ForwardBatcher();
  ForwardBatcher(const ForwardBatcher&) = delete;
  ForwardBatcher& operator=(const ForwardBatcher&) = delete;

  // Runs `encodings` through `model` (see LoadedModel::Run), possibly in one pass with other calls
  // for the same model (its on_layer_done is replaced by `check`). Returns this call's rows only,
  // with at least the outputs `options` asks for: tensors [encodings.size(), ...] whose sequence
  // axes may be padded beyond this call's own longest input, as in any batch; `encodings[b].size()`
  // says how many positions are real. Errors: what LoadedModel::Run returns; the status of
  // `check` (every 50 ms while the call waits in the queue, then before the pass and after each
  // layer; a pass stops early only when every call in it has stopped); Internal for a LibTorch
  // exception. `check` is never called from two threads at once. Thread-safe; blocks until the
  // call's pass has run or the call has stopped.
  // `client` names who asks (any name; empty is a client too), for the turns between clients.
  absl::StatusOr<BatchOutput> Run(const LoadedModel& model, std::vector<Encoding> encodings,
                                  const ForwardOptions& options, const CallCheck& check,
                                  absl::string_view client = "");

  const Options& options() const { return options_; }

 private:
  struct Call;

  void Loop();
  // The call that leads the next pass: the oldest of the client served the longest ago. The
  // queue must not be empty.
  Call* Head() const ABSL_SHARED_LOCKS_REQUIRED(mutex_);
  // The calls of the next pass: Head, then every other queued call (oldest first) that can share
  // its pass within the size and token bounds. `full` says whether the pass is full (a
  // bound reached, or a call that could share it left out by one).
  std::vector<Call*> PlanBatch(bool* full) const ABSL_SHARED_LOCKS_REQUIRED(mutex_);
  bool OldestBatchIsFullOrStopping() const ABSL_SHARED_LOCKS_REQUIRED(mutex_);
  bool HasWorkOrStopping() const ABSL_SHARED_LOCKS_REQUIRED(mutex_);
  // Drops the clients of served_ that have no call queued: the table holds the queue's clients.
  void ForgetClientsWithNothingQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Runs one pass and answers each of its calls.
  void RunBatch(std::vector<Call*> batch);

  const Options options_;
  BatchObserver* const observer_;
  absl::Mutex mutex_;
  std::deque<Call*> queue_ ABSL_GUARDED_BY(mutex_);
  // The passes run so far, and for each client with calls queued the pass that last served it
  // (or the count of passes when its first queued call arrived).
  uint64_t passes_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::flat_hash_map<std::string, uint64_t> served_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_BATCHER_H_
