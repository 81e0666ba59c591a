// Request decoding as the gRPC front end sees it: arbitrary bytes parsed as each attnscope.v1
// request the request layer takes (Tokenize, GetAttention, Encode, CrossAttention, GetParameter,
// Attribute, Generate), and every message that parses converted with ToQuery
// (server/query_convert.h).
#include <cstddef>
#include <cstdint>

#include "attnscope/v1/attnscope.pb.h"
#include "fuzz/request_checks.h"
#include "google/protobuf/stubs/logging.h"

namespace {

template <typename Request>
void Decode(const uint8_t* data, size_t size) {
  Request request;
  if (request.ParseFromArray(data, static_cast<int>(size))) attnscope::fuzz::CheckToQuery(request);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // libprotobuf logs every string field with invalid UTF-8 it refuses: noise, and slow.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace v1 = attnscope::v1;
  Decode<v1::TokenizeRequest>(data, size);
  Decode<v1::GetAttentionRequest>(data, size);
  Decode<v1::EncodeRequest>(data, size);
  Decode<v1::CrossAttentionRequest>(data, size);
  Decode<v1::GetParameterRequest>(data, size);
  Decode<v1::AttributeRequest>(data, size);
  Decode<v1::GenerateRequest>(data, size);
  return 0;
}
