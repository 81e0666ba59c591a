// sentencepiece_bridge::Processor's calls, forwarded to the module's processor: the same whether
// the module is dlopen()ed (sentencepiece_bridge.cc) or linked in (sentencepiece_linked_bridge.cc),
// which differ only in how they make it. Must not include Abseil (see sentencepiece_bridge.h).
#include "models/tokenizers/sentencepiece_bridge.h"
#include "models/tokenizers/sentencepiece_module.h"

namespace attnscope::sentencepiece_bridge {

Processor::Processor() = default;

Processor::~Processor() = default;

bool Processor::Encode(std::string_view text, std::vector<Piece>* pieces,
                       std::string* error) const {
  return impl_->Encode(text, pieces, error);
}

bool Processor::Decode(const std::vector<int>& ids, std::string* text, std::string* error) const {
  return impl_->Decode(ids, text, error);
}

bool Processor::DecodePieces(const std::vector<std::string>& pieces, std::string* text,
                             std::string* error) const {
  return impl_->DecodePieces(pieces, text, error);
}

int Processor::GetPieceSize() const { return impl_->GetPieceSize(); }
const std::string& Processor::IdToPiece(int id) const { return impl_->IdToPiece(id); }
bool Processor::IsControl(int id) const { return impl_->IsControl(id); }
bool Processor::IsUnknown(int id) const { return impl_->IsUnknown(id); }
int Processor::bos_id() const { return impl_->bos_id(); }
int Processor::eos_id() const { return impl_->eos_id(); }
int Processor::pad_id() const { return impl_->pad_id(); }
std::string Processor::NormalizerName() const { return impl_->NormalizerName(); }

}  // namespace attnscope::sentencepiece_bridge
