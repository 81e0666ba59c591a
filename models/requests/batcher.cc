#include "models/requests/batcher.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace attnscope {
namespace {

using Clock = std::chrono::steady_clock;

// Calls whose inputs are all this short share a pass whatever their lengths; longer ones only with
// calls at least half as long as the longest.
constexpr int64_t kShortInputTokens = 64;

// How often a call waiting in the queue is checked.
constexpr absl::Duration kQueueCheckInterval = absl::Milliseconds(50);

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Rows [start, start + count) of a batch tensor; undefined stays undefined.
torch::Tensor Rows(const torch::Tensor& tensor, int64_t start, int64_t count) {
  return tensor.defined() ? tensor.narrow(0, start, count) : tensor;
}

}  // namespace

struct ForwardBatcher::Call {
  const LoadedModel* model = nullptr;
  std::vector<Encoding> encodings;
  ForwardOptions options;
  const CallCheck* check = nullptr;
  std::string client;
  Clock::time_point queued;
  int64_t longest = 0;
  absl::StatusOr<BatchOutput> result;
  absl::Notification done;

  // Whether `other` may share this call's forward pass: the same model, and pre-softmax scores
  // for both or neither (they double a pass's memory). The other outputs are taken for all when
  // one call asks: the softmax probabilities are computed anyway, and hidden states and logits
  // cost little beside them.
  bool SharesPassWith(const Call& other) const {
    return model == other.model &&
           options.output_attention_scores == other.options.output_attention_scores;
  }
};

ForwardBatcher::ForwardBatcher(const Options& options, BatchObserver* observer)
    : options_(options), observer_(observer), thread_([this] { Loop(); }) {}

ForwardBatcher::~ForwardBatcher() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  thread_.join();
}

absl::StatusOr<BatchOutput> ForwardBatcher::Run(const LoadedModel& model,
                                                std::vector<Encoding> encodings,
                                                const ForwardOptions& options,
                                                const CallCheck& check, absl::string_view client) {
  Call call;
  call.client = std::string(client);
  call.model = &model;
  call.encodings = std::move(encodings);
  call.options = options;
  call.options.on_layer_done = nullptr;
  call.check = check ? &check : nullptr;
  for (const Encoding& encoding : call.encodings) {
    call.longest = std::max<int64_t>(call.longest, static_cast<int64_t>(encoding.size()));
  }
  call.queued = Clock::now();
  {
    absl::MutexLock lock(&mutex_);
    queue_.push_back(&call);
    // A client with nothing queued joins the round as if served now: behind those waiting.
    served_.try_emplace(call.client, passes_);
  }
  // A call that expires or is cancelled while it waits (behind a long pass, or for its batch to
  // fill) leaves the queue at once, rather than at its turn. The check runs under the lock so that
  // the batcher, which checks the calls it takes, never checks this one at the same time.
  while (call.check != nullptr && !call.done.WaitForNotificationWithTimeout(kQueueCheckInterval)) {
    absl::MutexLock lock(&mutex_);
    const auto queued = std::find(queue_.begin(), queue_.end(), &call);
    if (queued == queue_.end()) break;  // taken into a pass, which checks it
    absl::Status status = (*call.check)("while waiting for its forward pass");
    if (!status.ok()) {
      queue_.erase(queued);
      ForgetClientsWithNothingQueued();
      if (observer_ != nullptr) observer_->OnQueueWait(model.name(), SecondsSince(call.queued));
      return status;
    }
  }
  call.done.WaitForNotification();
  return std::move(call.result);
}

ForwardBatcher::Call* ForwardBatcher::Head() const {
  Call* head = nullptr;
  uint64_t head_served = 0;
  for (Call* call : queue_) {
    const uint64_t served = served_.at(call->client);
    if (head == nullptr || served < head_served) {
      head = call;
      head_served = served;
    }
  }
  return head;
}

std::vector<ForwardBatcher::Call*> ForwardBatcher::PlanBatch(bool* full) const {
  std::vector<Call*> batch;
  *full = false;
  // The queue empties when its calls leave it (stopped by their checks) during the queue delay.
  if (queue_.empty()) return batch;
  Call* const head = Head();
  int64_t sequences = 0;
  int64_t longest = 0;
  int64_t shortest = 0;
  std::vector<Call*> candidates = {head};
  for (Call* call : queue_) {
    if (call != head) candidates.push_back(call);
  }
  for (Call* call : candidates) {
    if (!batch.empty()) {
      if (!head->SharesPassWith(*call)) continue;
      // Padding a short call to a long one costs more than a pass of its own: attention grows
      // with the square of the padded length.
      const int64_t new_longest = std::max(longest, call->longest);
      if (new_longest > std::max(kShortInputTokens, 2 * std::min(shortest, call->longest))) {
        continue;
      }
      const int64_t more = sequences + static_cast<int64_t>(call->encodings.size());
      if (more > options_.max_batch_size || more * new_longest > options_.max_batch_tokens) {
        *full = true;
        continue;
      }
    }
    batch.push_back(call);
    sequences += static_cast<int64_t>(call->encodings.size());
    shortest = batch.size() == 1 ? call->longest : std::min(shortest, call->longest);
    longest = std::max(longest, call->longest);
  }
  if (sequences >= options_.max_batch_size) *full = true;
  return batch;
}

bool ForwardBatcher::OldestBatchIsFullOrStopping() const {
  if (stopping_ || queue_.empty()) return true;
  bool full = false;
  PlanBatch(&full);
  return full;
}

void ForwardBatcher::ForgetClientsWithNothingQueued() {
  absl::flat_hash_set<absl::string_view> queued;
  for (const Call* call : queue_) queued.insert(call->client);
  absl::erase_if(served_, [&queued](const auto& entry) { return !queued.contains(entry.first); });
}

bool ForwardBatcher::HasWorkOrStopping() const { return stopping_ || !queue_.empty(); }

void ForwardBatcher::Loop() {
  while (true) {
    std::vector<Call*> batch;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.Await(absl::Condition(this, &ForwardBatcher::HasWorkOrStopping));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      if (options_.max_queue_delay > absl::ZeroDuration()) {
        const absl::Duration waited = absl::FromChrono(Clock::now() - queue_.front()->queued);
        if (waited < options_.max_queue_delay) {
          mutex_.AwaitWithTimeout(
              absl::Condition(this, &ForwardBatcher::OldestBatchIsFullOrStopping),
              options_.max_queue_delay - waited);
        }
      }
      bool full = false;
      batch = PlanBatch(&full);
      if (batch.empty()) continue;
      ++passes_;
      for (Call* call : batch) {
        queue_.erase(std::find(queue_.begin(), queue_.end(), call));
        served_[call->client] = passes_;
      }
      ForgetClientsWithNothingQueued();
    }
    RunBatch(std::move(batch));
  }
}

void ForwardBatcher::RunBatch(std::vector<Call*> batch) {
  // A call is finished (and may be gone: its caller returns) once its Notification fires, so
  // everything needed afterwards is copied out first.
  auto finish = [](Call* call, absl::StatusOr<BatchOutput> result) {
    call->result = std::move(result);
    call->done.Notify();
  };
  std::vector<Call*> live;
  for (Call* call : batch) {
    if (observer_ != nullptr)
      observer_->OnQueueWait(call->model->name(), SecondsSince(call->queued));
    // Checked when the call's turn comes, not when it queues: it may expire while it waits.
    if (call->check != nullptr) {
      if (absl::Status status = (*call->check)("before the forward pass"); !status.ok()) {
        finish(call, std::move(status));
        continue;
      }
    }
    live.push_back(call);
  }
  if (live.empty()) return;

  const LoadedModel& model = *live.front()->model;
  ForwardOptions options = live.front()->options;
  for (const Call* call : live) {
    options.output_attentions |= call->options.output_attentions;
    options.output_hidden_states |= call->options.output_hidden_states;
    options.output_logits |= call->options.output_logits;
  }
  std::vector<Encoding> encodings;
  std::vector<int64_t> starts;
  std::vector<int64_t> counts;
  int64_t longest = 0;
  for (Call* call : live) {
    starts.push_back(static_cast<int64_t>(encodings.size()));
    counts.push_back(static_cast<int64_t>(call->encodings.size()));
    longest = std::max(longest, call->longest);
    for (Encoding& encoding : call->encodings) encodings.push_back(std::move(encoding));
  }
  const int64_t sequences = static_cast<int64_t>(encodings.size());

  // A call that stops between layers is answered at once; the pass goes on for the others and
  // stops only when none is left, so that a cancelled call alone stops using the CPU.
  std::vector<bool> finished(live.size(), false);
  size_t stopped = 0;
  options.on_layer_done = [&](int64_t layer) -> absl::Status {
    absl::Status last;
    const std::string when = absl::StrCat("after layer ", layer);
    for (size_t i = 0; i < live.size(); ++i) {
      if (finished[i] || live[i]->check == nullptr) continue;
      absl::Status status = (*live[i]->check)(when);
      if (status.ok()) continue;
      last = status;
      finished[i] = true;
      ++stopped;
      finish(live[i], std::move(status));
    }
    return stopped == live.size() ? last : absl::OkStatus();
  };

  const Clock::time_point start = Clock::now();
  absl::StatusOr<BatchOutput> output;
  try {
    output = model.Run(std::move(encodings), std::move(options));
  } catch (const std::exception& e) {
    output =
        absl::InternalError(absl::StrCat("forward pass of model '", model.name(), "': ", e.what()));
  }
  if (output.ok() && observer_ != nullptr) {
    observer_->OnForward(model.name(), static_cast<int64_t>(live.size()), sequences,
                         sequences * longest, SecondsSince(start));
  }
  for (size_t i = 0; i < live.size(); ++i) {
    if (finished[i]) continue;
    if (!output.ok()) {
      finish(live[i], output.status());
      continue;
    }
    if (live.size() == 1) {
      finish(live[i], std::move(output));
      break;
    }
    BatchOutput mine;
    const int64_t begin = starts[i];
    const int64_t count = counts[i];
    for (int64_t b = begin; b < begin + count; ++b) {
      mine.encodings.push_back(std::move(output->encodings[b]));
    }
    const ForwardOutput& all = output->forward;
    mine.forward.last_hidden_state = Rows(all.last_hidden_state, begin, count);
    for (const torch::Tensor& hidden : all.hidden_states) {
      mine.forward.hidden_states.push_back(Rows(hidden, begin, count));
    }
    for (const torch::Tensor& attention : all.attentions) {
      mine.forward.attentions.push_back(Rows(attention, begin, count));
    }
    for (const torch::Tensor& scores : all.attention_scores) {
      mine.forward.attention_scores.push_back(Rows(scores, begin, count));
    }
    mine.forward.pooler_output = Rows(all.pooler_output, begin, count);
    mine.forward.logits = Rows(all.logits, begin, count);
    mine.attention_mask = Rows(output->attention_mask, begin, count);
    finish(live[i], std::move(mine));
  }
}

}  // namespace attnscope
