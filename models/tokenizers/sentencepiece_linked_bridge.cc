// sentencepiece_bridge::Processor for the fuzz targets, with the attnscope_sentencepiece module
// linked in instead of dlopen()ed. AddressSanitizer refuses RTLD_DEEPBIND, which the real bridge
// (models/tokenizers/sentencepiece_bridge.cc) needs (google/sanitizers#611), and the fuzz targets
// that use it load neither LibTorch nor gRPC, so there is no libprotobuf for SentencePiece's
// bundled copy to collide with. Linking the module also puts its own code under the sanitizers.
// Must not include Abseil (see models/tokenizers/sentencepiece_bridge.h).
#include "models/tokenizers/sentencepiece_bridge.h"
#include "models/tokenizers/sentencepiece_module.h"

namespace attnscope::sentencepiece_bridge {

bool Processor::LoadModule(std::string*) { return true; }

bool Processor::Load(const std::string& path, std::string* error) {
  if (impl_ == nullptr) impl_.reset(AttnscopeNewSentencePieceProcessor());
  return impl_->Load(path, error);
}

}  // namespace attnscope::sentencepiece_bridge
