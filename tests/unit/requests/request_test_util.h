// The request layer in process, without a server: tiny models of each kind loaded once and a
// RequestRunner over them, for tests/unit/requests.
#ifndef ATTNSCOPE_TESTS_UNIT_REQUESTS_REQUEST_TEST_UTIL_H_
#define ATTNSCOPE_TESTS_UNIT_REQUESTS_REQUEST_TEST_UTIL_H_

#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "models/requests/requests.h"

namespace attnscope::testing {

// stories260K's config and weights beside tiny-bert's vocab.txt (137 ids, all below the Llama's
// 512): a decoder-only model whose tokenizer needs no SentencePiece module, which
// AddressSanitizer cannot load (scripts/test.sh), so the tests run under the sanitizers too.
std::string LlamaDir();

// A model loaded from `dir` and served as `name`; a failed load fails the test and returns null.
std::unique_ptr<LoadedModel> LoadModel(const std::string& name, const std::string& dir);

// A runner over "bert" (tests/data/tiny-bert, a one-label cross-encoder), "llama" (LlamaDir) and
// "bart" (tests/data/tiny-bart, an encoder-decoder), in that order, with `options`.
std::unique_ptr<RequestRunner> NewRunner(const RequestRunner::Options& options = {},
                                         RequestObserver* observer = nullptr);

// A CallCheck that never stops a call.
CallCheck NoCheck();

// Bytes of `tensors` at `bytes_per_element` each.
int64_t BytesOf(const std::vector<torch::Tensor>& tensors, int64_t bytes_per_element);

// Counts the texts tokenized (RequestObserver::OnTokenized).
class TokenizationCounter : public RequestObserver {
 public:
  void OnTokenized(double /*seconds*/, int64_t /*tokens*/) override { ++tokenized_; }
  void OnQueueWait(const std::string& /*model*/, double /*seconds*/) override {}
  void OnForward(const std::string& /*model*/, int64_t /*calls*/, int64_t /*sequences*/,
                 int64_t /*padded_tokens*/, double /*seconds*/) override {}
  int tokenized() const { return tokenized_; }

 private:
  std::atomic<int> tokenized_{0};
};

// The forward passes of one call: (sequences, padded tokens) of each (RequestObserver::OnForward).
class PassRecorder : public RequestObserver {
 public:
  void OnTokenized(double /*seconds*/, int64_t /*tokens*/) override {}
  void OnQueueWait(const std::string& /*model*/, double /*seconds*/) override {}
  void OnForward(const std::string& /*model*/, int64_t /*calls*/, int64_t sequences,
                 int64_t padded_tokens, double /*seconds*/) override {
    std::lock_guard<std::mutex> lock(mutex_);
    passes_.emplace_back(sequences, padded_tokens);
  }
  std::vector<std::pair<int64_t, int64_t>> passes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return passes_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<int64_t, int64_t>> passes_;
};

}  // namespace attnscope::testing

#endif  // ATTNSCOPE_TESTS_UNIT_REQUESTS_REQUEST_TEST_UTIL_H_
