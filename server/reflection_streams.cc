#include "server/reflection_streams.h"

#include <grpcpp/server_context.h>

#include <utility>

#include "absl/strings/match.h"

namespace attnscope::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr char kReflectionPrefix[] = "/grpc.reflection.";

class ReflectionStreamInterceptor : public grpc::experimental::Interceptor {
 public:
  ReflectionStreamInterceptor(ReflectionStreams* streams, grpc::ServerContextBase* context,
                              std::string client)
      : streams_(streams),
        context_(context),
        client_(std::move(client)),
        open_(streams->Open(context, client_)) {}

  ~ReflectionStreamInterceptor() override {
    if (open_) streams_->Close(context_, client_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // The handler's first read then fails and it returns, giving its thread back. TryCancel runs
    // the call's interceptors again (PRE_SEND_CANCEL), this one included: marked first.
    if (!open_ && !cancelled_) {
      cancelled_ = true;
      context_->TryCancel();
    }
    methods->Proceed();
  }

 private:
  ReflectionStreams* const streams_;
  grpc::ServerContextBase* const context_;
  const std::string client_;
  const bool open_;
  bool cancelled_ = false;
};

}  // namespace

ReflectionStreams::ReflectionStreams(Options options, const ClientAddresses* addresses,
                                     std::function<void()> on_refused)
    : options_(options), addresses_(addresses), on_refused_(std::move(on_refused)) {}

grpc::experimental::Interceptor* ReflectionStreams::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  if (!absl::StartsWith(info->method(), kReflectionPrefix)) return nullptr;
  grpc::ServerContextBase* context = info->server_context();
  return new ReflectionStreamInterceptor(
      this, context, addresses_ == nullptr ? std::string() : addresses_->Of(context->peer()));
}

void ReflectionStreams::CancelAll() {
  absl::MutexLock lock(&mutex_);
  stopped_ = true;
  for (grpc::ServerContextBase* context : open_) context->TryCancel();
}

bool ReflectionStreams::Open(grpc::ServerContextBase* context, const std::string& client) {
  {
    absl::MutexLock lock(&mutex_);
    int& mine = open_by_client_[client];
    if (!stopped_ && static_cast<int>(open_.size()) < options_.max_streams &&
        mine < options_.max_streams_per_client) {
      ++mine;
      open_.insert(context);
      return true;
    }
    if (mine == 0) open_by_client_.erase(client);
    // A stream refused because the server is stopping is no limit's refusal.
    if (stopped_) return false;
  }
  if (on_refused_) on_refused_();
  return false;
}

void ReflectionStreams::Close(grpc::ServerContextBase* context, const std::string& client) {
  absl::MutexLock lock(&mutex_);
  open_.erase(context);
  const auto found = open_by_client_.find(client);
  if (found != open_by_client_.end() && --found->second <= 0) open_by_client_.erase(found);
}

}  // namespace attnscope::server
