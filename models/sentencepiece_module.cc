// The attnscope_sentencepiece module (see sentencepiece_module.h). Must not include Abseil.
#include "models/sentencepiece_module.h"

#include "models/sentencepiece_bridge.h"
#include "sentencepiece_processor.h"

namespace attnscope::sentencepiece_bridge {
namespace {

class LibSentencePieceProcessor : public ModuleProcessor {
 public:
  bool Load(const std::string& path, std::string* error) override {
    const sentencepiece::util::Status status = impl_.Load(path);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
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

  int GetPieceSize() const override { return impl_.GetPieceSize(); }
  const std::string& IdToPiece(int id) const override { return impl_.IdToPiece(id); }
  bool IsControl(int id) const override { return impl_.IsControl(id); }
  bool IsUnknown(int id) const override { return impl_.IsUnknown(id); }
  int bos_id() const override { return impl_.bos_id(); }
  int eos_id() const override { return impl_.eos_id(); }
  int pad_id() const override { return impl_.pad_id(); }

 private:
  sentencepiece::SentencePieceProcessor impl_;
};

}  // namespace
}  // namespace attnscope::sentencepiece_bridge

extern "C" __attribute__((visibility("default"))) attnscope::sentencepiece_bridge::ModuleProcessor*
AttnscopeNewSentencePieceProcessor() {
  return new attnscope::sentencepiece_bridge::LibSentencePieceProcessor();
}
