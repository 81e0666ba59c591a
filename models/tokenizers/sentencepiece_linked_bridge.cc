// sentencepiece_bridge::Processor for the fuzz targets, with the attnscope_sentencepiece module
// linked in instead of dlopen()ed. AddressSanitizer refuses RTLD_DEEPBIND, which the real bridge
// (models/tokenizers/sentencepiece_bridge.cc) needs (google/sanitizers#611), and the fuzz targets
// that use it load neither LibTorch nor gRPC, so there is no libprotobuf for SentencePiece's
// bundled copy to collide with. Linking the module also puts its own code under the sanitizers.
// Must not include Abseil (see models/tokenizers/sentencepiece_bridge.h).
#include "models/tokenizers/sentencepiece_bridge.h"
#include "models/tokenizers/sentencepiece_module.h"

namespace attnscope::sentencepiece_bridge {

Processor::Processor() = default;

Processor::~Processor() = default;

bool Processor::LoadModule(std::string*) { return true; }

bool Processor::Load(const std::string& path, std::string* error) {
  if (impl_ == nullptr) impl_.reset(AttnscopeNewSentencePieceProcessor());
  return impl_->Load(path, error);
}

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
