// The binary interface between attnscope_models and the attnscope_sentencepiece module, the only
// code that links libsentencepiece.
//
// Why a separately loaded module: Debian's libsentencepiece exports its own bundled copy of
// protobuf-lite under the same symbol names as libprotobuf.so, which LibTorch and gRPC load. Linked
// into one process normally, libprotobuf's start-up code binds to SentencePiece's copies and
// crashes before main(). Loaded with dlopen(RTLD_LOCAL | RTLD_DEEPBIND), SentencePiece binds to its
// own copy and nobody else sees it. Only virtual calls and one extern "C" factory cross the
// boundary.
//
// Must not include Abseil or SentencePiece headers (see sentencepiece_bridge.h).
#ifndef ATTNSCOPE_MODELS_SENTENCEPIECE_MODULE_H_
#define ATTNSCOPE_MODELS_SENTENCEPIECE_MODULE_H_

#include <string>
#include <string_view>
#include <vector>

namespace attnscope::sentencepiece_bridge {

struct Piece;

// Mirrors sentencepiece::SentencePieceProcessor; see Processor in sentencepiece_bridge.h.
class ModuleProcessor {
 public:
  virtual ~ModuleProcessor() = default;
  virtual bool Load(const std::string& path, std::string* error) = 0;
  virtual bool Encode(std::string_view text, std::vector<Piece>* pieces,
                      std::string* error) const = 0;
  virtual bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const = 0;
  virtual bool DecodePieces(const std::vector<std::string>& pieces, std::string* text,
                            std::string* error) const = 0;
  virtual int GetPieceSize() const = 0;
  virtual const std::string& IdToPiece(int id) const = 0;
  virtual bool IsControl(int id) const = 0;
  virtual bool IsUnknown(int id) const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int pad_id() const = 0;
  virtual std::string NormalizerName() const = 0;
};

}  // namespace attnscope::sentencepiece_bridge

// Exported by the module: a new processor owned by the caller.
extern "C" attnscope::sentencepiece_bridge::ModuleProcessor* AttnscopeNewSentencePieceProcessor();

#endif  // ATTNSCOPE_MODELS_SENTENCEPIECE_MODULE_H_
