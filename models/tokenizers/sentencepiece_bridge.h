// The part of libsentencepiece that attnscope uses, behind a header that includes neither
// SentencePiece nor Abseil. Debian's sentencepiece_processor.h declares `absl::string_view` as an
// alias of std::string_view, which collides with Abseil's own absl::string_view class (this Abseil
// is built with ABSL_OPTION_USE_STD_STRING_VIEW 0), so the two headers can never meet in one
// translation unit: sentencepiece_bridge.cc is the only file that includes SentencePiece.
#ifndef ATTNSCOPE_MODELS_SENTENCEPIECE_BRIDGE_H_
#define ATTNSCOPE_MODELS_SENTENCEPIECE_BRIDGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attnscope::sentencepiece_bridge {

// One encoded piece and the span [begin, end) of input bytes it covers (SentencePieceText).
struct Piece {
  int id = 0;
  std::string piece;
  uint32_t begin = 0;
  uint32_t end = 0;
};

class ModuleProcessor;

// A thin wrapper over sentencepiece::SentencePieceProcessor, which lives in the separately loaded
// attnscope_sentencepiece module (sentencepiece_module.h says why); methods mirror its names.
// Failing calls return false and set `error` to SentencePiece's status message. Load also fails,
// naming the path tried and the environment variable ATTNSCOPE_SENTENCEPIECE_MODULE, when the
// module cannot be loaded; the other methods must only be called after a successful Load.
class Processor {
 public:
  Processor();
  ~Processor();
  Processor(const Processor&) = delete;
  Processor& operator=(const Processor&) = delete;

  // Loads the attnscope_sentencepiece module once per process; false with `error` naming the paths
  // tried and ATTNSCOPE_SENTENCEPIECE_MODULE when it cannot be loaded (an installation problem,
  // not a bad model file).
  static bool LoadModule(std::string* error);

  bool Load(const std::string& path, std::string* error);
  bool Encode(std::string_view text, std::vector<Piece>* pieces, std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const;
  // Pieces the model lacks decode as its unknown piece (SentencePiece's DecodePieces).
  bool DecodePieces(const std::vector<std::string>& pieces, std::string* text,
                    std::string* error) const;

  int GetPieceSize() const;
  // `id` must be in [0, GetPieceSize()).
  const std::string& IdToPiece(int id) const;
  bool IsControl(int id) const;
  bool IsUnknown(int id) const;
  // -1 when the model defines no such token.
  int bos_id() const;
  int eos_id() const;
  int pad_id() const;
  // The model's normalizer_spec name: "nmt_nfkc", "nfkc", "nmt_nfkc_cf", "identity", ... ("" when
  // the model file names none).
  std::string NormalizerName() const;

 private:
  std::unique_ptr<ModuleProcessor> impl_;
};

}  // namespace attnscope::sentencepiece_bridge

#endif  // ATTNSCOPE_MODELS_SENTENCEPIECE_BRIDGE_H_
