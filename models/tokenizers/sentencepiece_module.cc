// The attnscope_sentencepiece module (see sentencepiece_module.h). Must not include Abseil.
#include "models/tokenizers/sentencepiece_module.h"

#include <cmath>
#include <cstdint>

#include "models/tokenizers/sentencepiece_bridge.h"
#include "sentencepiece_processor.h"

namespace attnscope::sentencepiece_bridge {
namespace {

// Reads a base-128 varint at `*at`, advancing it; false past the end.
bool ReadVarint(const std::string& bytes, size_t* at, uint64_t* value) {
  *value = 0;
  for (int shift = 0; *at < bytes.size() && shift < 64; shift += 7) {
    const unsigned char byte = static_cast<unsigned char>(bytes[(*at)++]);
    *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// The length-delimited field `number` of the serialized message `bytes`, or "" when absent. Debian
// ships libsentencepiece without sentencepiece_model.pb.h, so ModelProto's fields are read from its
// wire format: ModelProto.normalizer_spec is field 3, NormalizerSpec.name field 1.
std::string LengthDelimitedField(const std::string& bytes, uint64_t number) {
  size_t at = 0;
  uint64_t key = 0;
  while (ReadVarint(bytes, &at, &key)) {
    uint64_t length = 0;
    switch (key & 7) {
      case 0:  // varint
        if (!ReadVarint(bytes, &at, &length)) return "";
        break;
      case 1:  // 64-bit
        at += 8;
        break;
      case 2:  // length-delimited
        if (!ReadVarint(bytes, &at, &length) || length > bytes.size() - at) return "";
        if ((key >> 3) == number) return bytes.substr(at, length);
        at += length;
        break;
      case 5:  // 32-bit
        at += 4;
        break;
      default:
        return "";
    }
  }
  return "";
}

class LibSentencePieceProcessor : public ModuleProcessor {
 public:
  bool Load(const std::string& path, std::string* error) override {
    const sentencepiece::util::Status status = impl_.Load(path);
    if (!status.ok()) {
      *error = status.ToString();
      return false;
    }
    // SentencePiece accepts any float: a NaN score compares false with every other, which leaves
    // the best segmentation undefined (it then depends on the order pieces are tried in).
    for (int id = 0; id < impl_.GetPieceSize(); ++id) {
      const float score = impl_.GetScore(id);
      if (!std::isfinite(score)) {
        *error = "piece " + std::to_string(id) + " '" + impl_.IdToPiece(id) +
                 "': expected a finite score, got " + std::to_string(score);
        return false;
      }
    }
    return true;
  }

  bool Encode(std::string_view text, std::vector<Piece>* pieces,
              std::string* error) const override {
    sentencepiece::ImmutableSentencePieceText encoded;
    const sentencepiece::util::Status status = impl_.Encode(text, encoded.mutable_proto());
    if (!status.ok()) {
      *error = status.ToString();
      return false;
    }
    pieces->clear();
    pieces->reserve(encoded.pieces_size());
    for (const auto& piece : encoded.pieces()) {
      pieces->push_back({static_cast<int>(piece.id()), piece.piece(), piece.begin(), piece.end()});
    }
    return true;
  }

  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const override {
    const sentencepiece::util::Status status = impl_.Decode(ids, text);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }

  bool DecodePieces(const std::vector<std::string>& pieces, std::string* text,
                    std::string* error) const override {
    const sentencepiece::util::Status status = impl_.Decode(pieces, text);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }

  int GetPieceSize() const override { return impl_.GetPieceSize(); }
  const std::string& IdToPiece(int id) const override { return impl_.IdToPiece(id); }
  bool IsControl(int id) const override { return impl_.IsControl(id); }
  bool IsUnknown(int id) const override { return impl_.IsUnknown(id); }
  int bos_id() const override { return impl_.bos_id(); }
  int eos_id() const override { return impl_.eos_id(); }
  int pad_id() const override { return impl_.pad_id(); }
  std::string NormalizerName() const override {
    return LengthDelimitedField(LengthDelimitedField(impl_.serialized_model_proto(), /*number=*/3),
                                /*number=*/1);
  }

 private:
  sentencepiece::SentencePieceProcessor impl_;
};

}  // namespace
}  // namespace attnscope::sentencepiece_bridge

extern "C" __attribute__((visibility("default"))) attnscope::sentencepiece_bridge::ModuleProcessor*
AttnscopeNewSentencePieceProcessor() {
  return new attnscope::sentencepiece_bridge::LibSentencePieceProcessor();
}
