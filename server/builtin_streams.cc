#include "server/builtin_streams.h"

#include <grpcpp/server_context.h>

#include <utility>

#include "absl/strings/match.h"

namespace attnscope::server {
namespace {

class BuiltinStreamInterceptor : public grpc::experimental::Interceptor {
 public:
  BuiltinStreamInterceptor(BuiltinStreams* streams, grpc::ServerContextBase* context)
      : streams_(streams), context_(context) {}

  ~BuiltinStreamInterceptor() override {
    if (open_) streams_->Close(context_, client_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // Decided at the first interception: when the interceptor is made, gRPC has not yet given
    // the call its peer, and every client looked like one.
    if (!decided_) {
      decided_ = true;
      client_ = streams_->ClientOf(context_);
      open_ = streams_->Open(context_, client_);
      // The handler's first read then fails and it returns, giving its thread back. TryCancel
      // runs the call's interceptors again (PRE_SEND_CANCEL), this one included: decided first.
      if (!open_) context_->TryCancel();
    }
    methods->Proceed();
  }

 private:
  BuiltinStreams* const streams_;
  grpc::ServerContextBase* const context_;
  bool decided_ = false;
  std::string client_;
  bool open_ = false;
};

}  // namespace

BuiltinStreams::BuiltinStreams(Options options, const ClientAddresses* addresses,
                               std::function<void()> on_refused)
    : options_(options), addresses_(addresses), on_refused_(std::move(on_refused)) {}

grpc::experimental::Interceptor* BuiltinStreams::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  if (!absl::StartsWith(info->method(), options_.method_prefix)) return nullptr;
  return new BuiltinStreamInterceptor(this, info->server_context());
}

std::string BuiltinStreams::ClientOf(grpc::ServerContextBase* context) const {
  return addresses_ == nullptr ? std::string() : addresses_->Of(context->peer());
}

void BuiltinStreams::CancelAll() {
  absl::MutexLock lock(&mutex_);
  stopped_ = true;
  for (grpc::ServerContextBase* context : open_) context->TryCancel();
}

bool BuiltinStreams::Open(grpc::ServerContextBase* context, const std::string& client) {
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

void BuiltinStreams::Close(grpc::ServerContextBase* context, const std::string& client) {
  absl::MutexLock lock(&mutex_);
  open_.erase(context);
  const auto found = open_by_client_.find(client);
  if (found != open_by_client_.end() && --found->second <= 0) open_by_client_.erase(found);
}

}  // namespace attnscope::server
