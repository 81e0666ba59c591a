// The client library without the real server: tensor decoding (float16/bfloat16 widening against
// known bit patterns and an independent formula), status conversion, .npy encoding, the channel's
// service config, and — against small in-process fake servers — stream reassembly, stream protocol
// errors, retries of UNAVAILABLE and round-robin balancing.
#include "client/client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/npy.h"
#include "client/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnscope {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

std::string LittleEndian(const std::vector<uint32_t>& words, int bytes_per_word) {
  std::string out;
  for (uint32_t word : words) {
    for (int i = 0; i < bytes_per_word; ++i)
      out.push_back(static_cast<char>((word >> (8 * i)) & 0xFF));
  }
  return out;
}

v1::Tensor FloatTensor(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  v1::Tensor tensor;
  tensor.mutable_shape()->Add(shape.begin(), shape.end());
  tensor.set_dtype(v1::DTYPE_FLOAT32);
  std::vector<uint32_t> words;
  for (float value : values) words.push_back(Bits(value));
  tensor.set_data(LittleEndian(words, 4));
  return tensor;
}

TEST(HalfToFloatTest, KnownBitPatterns) {
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);                  // largest finite half
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(HalfToFloat(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(Bits(HalfToFloat(0x0000)), 0x00000000u);
  EXPECT_EQ(Bits(HalfToFloat(0x8000)), 0x80000000u);  // -0 keeps its sign
  EXPECT_EQ(HalfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7C01)));  // signalling NaN stays NaN, not infinity
  EXPECT_EQ(Bits(HalfToFloat(0xFE00)), 0xFFC00000u);
}

// Every one of the 65536 half values against the definition (-1)^s * 2^(e-15) * (1 + m/1024), or
// 2^-14 * m/1024 for subnormals, computed in double.
TEST(HalfToFloatTest, MatchesDefinitionForAllBitPatterns) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const int sign = (bits >> 15) ? -1 : 1;
    const int exponent = (bits >> 10) & 0x1F;
    const int mantissa = bits & 0x3FF;
    const float value = HalfToFloat(static_cast<uint16_t>(bits));
    if (exponent == 0x1F) {
      if (mantissa == 0) {
        EXPECT_EQ(value, sign * std::numeric_limits<float>::infinity()) << bits;
      } else {
        EXPECT_TRUE(std::isnan(value)) << bits;
      }
      continue;
    }
    const double expected = exponent == 0
                                ? sign * std::ldexp(static_cast<double>(mantissa), -24)
                                : sign * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
    ASSERT_EQ(static_cast<double>(value), expected) << "bits 0x" << std::hex << bits;
  }
}

TEST(BFloat16ToFloatTest, KnownBitPatterns) {
  EXPECT_EQ(BFloat16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(0xC000), -2.0f);
  EXPECT_EQ(BFloat16ToFloat(0x3EAB), 0.333984375f);
  EXPECT_EQ(BFloat16ToFloat(0x0001), std::ldexp(1.0f, -133));  // smallest subnormal
  EXPECT_EQ(BFloat16ToFloat(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(BFloat16ToFloat(0xFF80), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(0x7FC0)));
  EXPECT_EQ(Bits(BFloat16ToFloat(0x8000)), 0x80000000u);
}

TEST(DecodeTensorTest, Float32) {
  v1::Tensor tensor = FloatTensor({2, 3}, {0.5f, -1.25f, 3.0f, 1e-30f, -0.0f, 7.0f});
  tensor.add_dim_names("query_token");
  tensor.add_dim_names("key_token");
  absl::StatusOr<DecodedTensor> decoded = DecodeTensor(tensor);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_THAT(decoded->shape, ElementsAre(2, 3));
  EXPECT_THAT(decoded->dim_names, ElementsAre("query_token", "key_token"));
  EXPECT_THAT(decoded->values, ElementsAre(0.5f, -1.25f, 3.0f, 1e-30f, -0.0f, 7.0f));
  EXPECT_TRUE(decoded->int_values.empty());
  EXPECT_EQ(decoded->At({1, 2}), 7.0f);
  EXPECT_EQ(decoded->num_elements(), 6);
}

// The decoder widens groups of 8 with F16C where the CPU has it, and the rest with a table: every
// bit pattern, at every position within a group (the count is not a multiple of 8) and beside
// infinities and NaNs, must come out as HalfToFloat gives it, bit for bit.
TEST(DecodeTensorTest, Float16MatchesHalfToFloatForAllBitPatterns) {
  std::vector<uint32_t> words;
  for (uint32_t shift = 0; shift < 3; ++shift) {
    for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) words.push_back((bits + shift) & 0xFFFF);
  }
  words.resize(words.size() - 5);
  v1::Tensor half;
  half.add_shape(static_cast<int64_t>(words.size()));
  half.set_dtype(v1::DTYPE_FLOAT16);
  half.set_data(LittleEndian(words, 2));
  absl::StatusOr<DecodedTensor> decoded = DecodeTensor(half);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->values.size(), words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    ASSERT_EQ(Bits(decoded->values[i]), Bits(HalfToFloat(static_cast<uint16_t>(words[i]))))
        << "element " << i << ", bits 0x" << std::hex << words[i];
  }
}

TEST(DecodeTensorTest, Float16AndBFloat16AreWidened) {
  v1::Tensor half;
  half.add_shape(3);
  half.set_dtype(v1::DTYPE_FLOAT16);
  half.set_data(LittleEndian({0x3C00, 0xC000, 0x0001}, 2));
  absl::StatusOr<DecodedTensor> decoded = DecodeTensor(half);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->wire_dtype, v1::DTYPE_FLOAT16);
  EXPECT_THAT(decoded->values, ElementsAre(1.0f, -2.0f, std::ldexp(1.0f, -24)));

  v1::Tensor bf16 = half;
  bf16.set_dtype(v1::DTYPE_BFLOAT16);
  bf16.set_data(LittleEndian({0x3F80, 0xC000, 0x3EAB}, 2));
  decoded = DecodeTensor(bf16);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_THAT(decoded->values, ElementsAre(1.0f, -2.0f, 0.333984375f));
}

TEST(DecodeTensorTest, Int32) {
  v1::Tensor tensor;
  tensor.add_shape(1);
  tensor.add_shape(3);
  tensor.set_dtype(v1::DTYPE_INT32);
  tensor.set_data(LittleEndian({7, 0, 0xFFFFFFFFu}, 4));
  absl::StatusOr<DecodedTensor> decoded = DecodeTensor(tensor);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->is_int());
  EXPECT_THAT(decoded->int_values, ElementsAre(7, 0, -1));
  EXPECT_TRUE(decoded->values.empty());
}

TEST(DecodeTensorTest, MalformedTensorsAreInternalErrors) {
  v1::Tensor short_data = FloatTensor({2, 3}, {1, 2, 3, 4, 5});
  absl::StatusOr<DecodedTensor> decoded = DecodeTensor(short_data);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(decoded.status().message(), HasSubstr("20 data bytes; expected 24"));

  v1::Tensor huge = FloatTensor({int64_t{1} << 40, int64_t{1} << 40}, {1});
  EXPECT_EQ(DecodeTensor(huge).status().code(), absl::StatusCode::kInternal);

  v1::Tensor no_dtype = FloatTensor({1}, {1});
  no_dtype.set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_THAT(DecodeTensor(no_dtype).status().message(), HasSubstr("dtype"));

  v1::Tensor names = FloatTensor({1}, {1});
  names.add_dim_names("a");
  names.add_dim_names("b");
  EXPECT_EQ(DecodeTensor(names).status().code(), absl::StatusCode::kInternal);
}

TEST(FromGrpcStatusTest, KeepsCodeAndMessage) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  const std::vector<grpc::StatusCode> codes = {
      grpc::StatusCode::INVALID_ARGUMENT,   grpc::StatusCode::NOT_FOUND,
      grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::UNAVAILABLE,
      grpc::StatusCode::DEADLINE_EXCEEDED,  grpc::StatusCode::UNAUTHENTICATED,
      grpc::StatusCode::INTERNAL,           grpc::StatusCode::CANCELLED};
  for (grpc::StatusCode code : codes) {
    absl::Status status = FromGrpcStatus(grpc::Status(code, "layer 9 out of range"));
    EXPECT_EQ(static_cast<int>(status.code()), static_cast<int>(code));
    EXPECT_EQ(status.message(), "layer 9 out of range");
  }
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "x")).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(FromGrpcStatusTest, SaysWhichSideRefusedAnOversizedMessage) {
  const grpc::Status too_large(grpc::StatusCode::RESOURCE_EXHAUSTED,
                               "Received message larger than max (5400018 vs. 4194304)");
  // The limit in the message is this client's own: the answer was too large.
  absl::Status answer = FromGrpcStatus(too_large, /*receive_limit_bytes=*/4194304);
  EXPECT_EQ(answer.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(answer.message()), HasSubstr("the answer is larger than this client"));
  EXPECT_THAT(std::string(answer.message()), HasSubstr("max_response_bytes"));
  // Another limit: the server refused the request.
  absl::Status request = FromGrpcStatus(too_large, /*receive_limit_bytes=*/65 << 20);
  EXPECT_EQ(request.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(request.message()),
              HasSubstr("the request is 5400018 bytes, over the 4194304 bytes the server accepts"));
  EXPECT_THAT(std::string(request.message()), HasSubstr("shorter texts"));
}

TEST(NpyTest, HeaderAndData) {
  DecodedTensor tensor;
  tensor.shape = {2, 1};
  tensor.values = {1.0f, -2.0f};
  const std::string npy = EncodeNpy(tensor);
  ASSERT_GE(npy.size(), 10u);
  EXPECT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_size =
      static_cast<unsigned char>(npy[8]) | (static_cast<unsigned char>(npy[9]) << 8);
  EXPECT_EQ((10 + header_size) % 64, 0u);
  const std::string header = npy.substr(10, header_size);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }", 0), 0u);
  EXPECT_EQ(header.back(), '\n');
  ASSERT_EQ(npy.size(), 10 + header_size + 8);
  EXPECT_EQ(npy.substr(10 + header_size), LittleEndian({0x3F800000u, 0xC0000000u}, 4));

  DecodedTensor indices;
  indices.shape = {3};
  indices.wire_dtype = v1::DTYPE_INT32;
  indices.int_values = {1, 2, -1};
  const std::string int_npy = EncodeNpy(indices);
  EXPECT_NE(int_npy.find("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }"),
            std::string::npos);
  EXPECT_EQ(int_npy.substr(int_npy.size() - 12), LittleEndian({1, 2, 0xFFFFFFFFu}, 4));
}

TEST(ServiceConfigTest, RoundRobinAndRetryOnUnavailable) {
  ClientOptions options;
  options.max_attempts = 3;
  options.initial_backoff = absl::Milliseconds(50);
  options.max_backoff = absl::Seconds(1);
  const nlohmann::json config = nlohmann::json::parse(ServiceConfigJson(options));
  EXPECT_TRUE(config["loadBalancingConfig"][0].contains("round_robin"));
  const nlohmann::json& method = config["methodConfig"][0];
  EXPECT_EQ(method["name"][0]["service"], "attnscope.v1.AttentionService");
  EXPECT_EQ(method["retryPolicy"]["maxAttempts"], 3);
  EXPECT_EQ(method["retryPolicy"]["initialBackoff"], "0.05s");
  EXPECT_EQ(method["retryPolicy"]["maxBackoff"], "1s");
  EXPECT_EQ(method["retryPolicy"]["retryableStatusCodes"][0], "UNAVAILABLE");

  options.max_attempts = 1;
  EXPECT_FALSE(
      nlohmann::json::parse(ServiceConfigJson(options))["methodConfig"][0].contains("retryPolicy"));
}

TEST(ClientCreateTest, RejectsBadOptions) {
  ClientOptions options;
  options.target = "";
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = ClientOptions();
  options.max_attempts = 0;
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = ClientOptions();
  options.max_response_bytes = int64_t{4} << 30;
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// An AttentionService whose answers the test scripts.
class FakeService final : public v1::AttentionService::Service {
 public:
  grpc::Status ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                          v1::ListModelsResponse* response) override {
    const int call = calls_.fetch_add(1);
    if (call < unavailable_calls_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "loading");
    response->add_models()->set_name(name_);
    return grpc::Status::OK;
  }

  grpc::Status StreamAttention(grpc::ServerContext*, const v1::GetAttentionRequest*,
                               grpc::ServerWriter<v1::StreamAttentionResponse>* writer) override {
    // A copy: the client may give up on a corrupt stream and the test script the next one while
    // this handler is still writing.
    std::vector<v1::StreamAttentionResponse> stream;
    {
      std::lock_guard<std::mutex> lock(stream_mutex_);
      stream = stream_;
    }
    for (const v1::StreamAttentionResponse& message : stream) writer->Write(message);
    return grpc::Status::OK;
  }

  void set_stream(std::vector<v1::StreamAttentionResponse> stream) {
    std::lock_guard<std::mutex> lock(stream_mutex_);
    stream_ = std::move(stream);
  }

  std::string name_ = "fake";
  int unavailable_calls_ = 0;
  std::atomic<int> calls_{0};

 private:
  std::mutex stream_mutex_;
  std::vector<v1::StreamAttentionResponse> stream_;
};

// A FakeService listening on an ephemeral loopback port; shut down on destruction.
class FakeServer {
 public:
  FakeServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~FakeServer() { server_->Shutdown(); }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  FakeService& service() { return service_; }

 private:
  FakeService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

std::unique_ptr<Client> MakeClient(const std::string& target, int max_attempts = 4) {
  ClientOptions options;
  options.target = target;
  options.max_attempts = max_attempts;
  options.initial_backoff = absl::Milliseconds(10);
  options.default_timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

// A two-layer, two-head, 2x3 stream with scores and top-k style int indices.
std::vector<v1::StreamAttentionResponse> TwoLayerStream() {
  std::vector<v1::StreamAttentionResponse> stream(3);
  v1::StreamAttentionHeader* header = stream[0].mutable_header();
  header->set_model("fake");
  header->mutable_tokens()->add_tokens("a");
  header->add_layers(1);
  header->add_layers(0);
  header->add_heads(0);
  header->add_heads(1);
  for (int64_t size : {2, 2, 2, 3}) header->add_attentions_shape(size);
  for (const char* name : {"layer", "head", "query_token", "key_token"})
    header->add_dim_names(name);
  header->set_dtype(v1::DTYPE_FLOAT32);
  for (int layer = 0; layer < 2; ++layer) {
    v1::StreamAttentionLayer* message = stream[1 + layer].mutable_layer();
    message->set_layer(layer == 0 ? 1 : 0);
    std::vector<float> values;
    for (int i = 0; i < 12; ++i) values.push_back(static_cast<float>(100 * layer + i));
    *message->mutable_attentions() = FloatTensor({2, 2, 3}, values);
    for (float& value : values) value = -value;
    *message->mutable_scores() = FloatTensor({2, 2, 3}, values);
  }
  return stream;
}

TEST(StreamAttentionTest, ReassemblesLayersIntoOneTensor) {
  FakeServer server;
  std::vector<v1::StreamAttentionResponse> stream = TwoLayerStream();
  v1::StreamAttentionResponse rollout;
  *rollout.mutable_rollout()->mutable_rollout() = FloatTensor({2, 3}, {1, 0, 0, 0, 1, 0});
  stream.push_back(rollout);
  server.service().set_stream(std::move(stream));
  std::unique_ptr<Client> client = MakeClient(server.address());
  absl::StatusOr<AttentionResult> result = client->StreamAttention(v1::GetAttentionRequest());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->model, "fake");
  EXPECT_THAT(result->layers, ElementsAre(1, 0));
  EXPECT_THAT(result->attentions.shape, ElementsAre(2, 2, 2, 3));
  EXPECT_THAT(result->attentions.dim_names,
              ElementsAre("layer", "head", "query_token", "key_token"));
  ASSERT_EQ(result->attentions.values.size(), 24u);
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(result->attentions.values[i], static_cast<float>(100 * (i / 12) + i % 12)) << i;
    EXPECT_EQ(result->scores->values[i], -result->attentions.values[i]) << i;
  }
  EXPECT_THAT(result->scores->shape, ElementsAre(2, 2, 2, 3));
  EXPECT_FALSE(result->top_k_indices.has_value());
  ASSERT_TRUE(result->rollout.has_value());
  EXPECT_THAT(result->rollout->values, ElementsAre(1, 0, 0, 0, 1, 0));
}

TEST(StreamAttentionTest, ReassemblesLayersSentInPieces) {
  // The same stream with layer 1 cut into its two heads and layer 0's heads into single rows, and
  // the rollout into two pieces of one row: the answer is the same.
  std::vector<v1::StreamAttentionResponse> whole = TwoLayerStream();
  std::vector<v1::StreamAttentionResponse> stream = {whole[0]};
  auto piece = [](const v1::StreamAttentionLayer& layer, int head, int rows, int row) {
    v1::StreamAttentionResponse message;
    v1::StreamAttentionLayer* out = message.mutable_layer();
    out->set_layer(layer.layer());
    out->set_head_offset(head);
    out->set_query_offset(row);
    const auto cut = [&](const v1::Tensor& tensor) {
      std::vector<float> values(rows * 3);
      const float* data = reinterpret_cast<const float*>(tensor.data().data());
      std::copy(data + (head * 2 + row) * 3, data + (head * 2 + row + rows) * 3, values.begin());
      return FloatTensor({1, rows, 3}, values);
    };
    *out->mutable_attentions() = cut(layer.attentions());
    *out->mutable_scores() = cut(layer.scores());
    return message;
  };
  for (int head = 0; head < 2; ++head) stream.push_back(piece(whole[1].layer(), head, 2, 0));
  for (int head = 0; head < 2; ++head) {
    for (int row = 0; row < 2; ++row) stream.push_back(piece(whole[2].layer(), head, 1, row));
  }
  for (int row = 0; row < 2; ++row) {
    v1::StreamAttentionResponse rollout;
    rollout.mutable_rollout()->set_query_offset(row);
    *rollout.mutable_rollout()->mutable_rollout() =
        FloatTensor({1, 3}, {static_cast<float>(row), 1, 2});
    stream.push_back(rollout);
  }
  FakeServer server;
  server.service().set_stream(std::move(stream));
  std::unique_ptr<Client> client = MakeClient(server.address());
  absl::StatusOr<AttentionResult> result = client->StreamAttention(v1::GetAttentionRequest());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->attentions.values.size(), 24u);
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(result->attentions.values[i], static_cast<float>(100 * (i / 12) + i % 12)) << i;
    EXPECT_EQ(result->scores->values[i], -result->attentions.values[i]) << i;
  }
  ASSERT_TRUE(result->rollout.has_value());
  EXPECT_THAT(result->rollout->shape, ElementsAre(2, 3));
  EXPECT_THAT(result->rollout->values, ElementsAre(0, 1, 2, 1, 1, 2));
}

TEST(StreamAttentionTest, ProtocolViolationsAreInternalErrors) {
  struct Case {
    const char* name;
    std::function<void(std::vector<v1::StreamAttentionResponse>&)> corrupt;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"missing layer", [](auto& s) { s.pop_back(); }, "ended after 1 of 2 layers"},
      {"no header", [](auto& s) { s.erase(s.begin()); }, "before the header"},
      {"wrong order", [](auto& s) { s[1].mutable_layer()->set_layer(0); }, "announced 1"},
      {"wrong slice shape",
       [](auto& s) {
         *s[2].mutable_layer()->mutable_attentions() = FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6});
       },
       "of [2, 2, 3]"},
      {"extra layer", [](auto& s) { s.push_back(s[2]); }, "more than the 2 layers"},
      {"piece out of order", [](auto& s) { s[1].mutable_layer()->set_head_offset(1); },
       "continuing at element 0"},
      {"rows of two heads",
       [](auto& s) {
         s[1].mutable_layer()->set_query_offset(1);
         *s[1].mutable_layer()->mutable_attentions() = FloatTensor({2, 1, 3}, {1, 2, 3, 4, 5, 6});
       },
       "whole heads or rows of one head"},
  };
  FakeServer server;
  std::unique_ptr<Client> client = MakeClient(server.address());
  for (const Case& c : cases) {
    std::vector<v1::StreamAttentionResponse> stream = TwoLayerStream();
    c.corrupt(stream);
    server.service().set_stream(stream);
    absl::StatusOr<AttentionResult> result = client->StreamAttention(v1::GetAttentionRequest());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal) << c.name;
    EXPECT_THAT(result.status().message(), HasSubstr(c.message)) << c.name;
  }
}

TEST(RetryTest, UnavailableIsRetriedUpToMaxAttempts) {
  FakeServer server;
  server.service().unavailable_calls_ = 2;
  std::unique_ptr<Client> client = MakeClient(server.address(), /*max_attempts=*/3);
  absl::StatusOr<std::vector<v1::ModelInfo>> models = client->ListModels();
  ASSERT_TRUE(models.ok()) << models.status();
  EXPECT_EQ(server.service().calls_.load(), 3);

  FakeServer stubborn;
  stubborn.service().unavailable_calls_ = 100;
  std::unique_ptr<Client> limited = MakeClient(stubborn.address(), /*max_attempts=*/2);
  models = limited->ListModels();
  EXPECT_EQ(models.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(models.status().message(), "loading");
  EXPECT_EQ(stubborn.service().calls_.load(), 2);
}

TEST(LoadBalancingTest, RoundRobinSpreadsCallsOverAllAddresses) {
  FakeServer first;
  FakeServer second;
  std::unique_ptr<Client> client =
      MakeClient("ipv4:" + first.address() + "," + second.address(), /*max_attempts=*/1);
  // Subchannels connect independently: call until both servers have answered once (bounded),
  // then count a fixed number of calls.
  for (int i = 0; i < 200 && (first.service().calls_ == 0 || second.service().calls_ == 0); ++i) {
    ASSERT_TRUE(client->ListModels().ok());
  }
  ASSERT_GT(first.service().calls_.load(), 0);
  ASSERT_GT(second.service().calls_.load(), 0);
  const int first_before = first.service().calls_;
  const int second_before = second.service().calls_;
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<std::vector<v1::ModelInfo>> models = client->ListModels();
    ASSERT_TRUE(models.ok()) << models.status();
  }
  // round_robin alternates between ready subchannels; pick_first would send all 10 to one.
  EXPECT_EQ(first.service().calls_ - first_before, 5);
  EXPECT_EQ(second.service().calls_ - second_before, 5);
}

TEST(ClientTest, UnreachableServerIsUnavailable) {
  // Port 1 on loopback is not listening in the test environment.
  ClientOptions options;
  options.target = "127.0.0.1:1";
  options.max_attempts = 1;
  options.default_timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Health().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace attnscope
