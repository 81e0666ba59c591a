#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "models/tokenizers/pipeline_chars.h"
#include "models/tokenizers/pipeline_tokenizer.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {

using pipeline_chars::IsWordChar;

std::vector<PipelineTokenizer::Segment> PipelineTokenizer::FindAddedTokens(
    std::string_view text, const unicode::DecodedText& decoded, bool normalized) const {
  std::vector<Segment> segments;
  const std::vector<std::vector<int32_t>>& table = added_by_first_byte_[normalized ? 1 : 0];
  const std::vector<char32_t>& cps = decoded.code_points;

  int64_t start_offset = 0;  // The end of the last split, in code points.
  int64_t scan = 0;          // Where the search for the next match starts.
  while (scan < decoded.size()) {
    // Leftmost, then longest.
    int64_t start = scan;
    int32_t found = -1;
    for (; start < decoded.size() && found < 0; ++start) {
      const std::string_view rest = text.substr(decoded.ByteOffset(start));
      for (int32_t k : table[static_cast<unsigned char>(rest[0])]) {
        const std::string& content = pipeline_.added_tokens[k].content;
        if (rest.compare(0, content.size(), content) == 0) {
          found = k;
          break;
        }
      }
    }
    if (found < 0) break;
    --start;
    const AddedToken& added = pipeline_.added_tokens[found];
    int64_t stop = decoded.CodePointsBeforeByte(decoded.ByteOffset(start) + added.content.size());
    scan = stop;
    if (added.single_word) {
      const bool start_space = start == 0 || !IsWordChar(cps[start - 1]);
      const bool stop_space = stop == decoded.size() || !IsWordChar(cps[stop]);
      if (!start_space || !stop_space) continue;
    }
    if (added.lstrip) {
      int64_t new_start = start;
      while (new_start > 0 && unicode::IsWhiteSpace(cps[new_start - 1])) --new_start;
      // Spaces a previous match took are not taken again.
      start = std::max(new_start, start_offset);
    }
    if (added.rstrip) {
      while (stop < decoded.size() && unicode::IsWhiteSpace(cps[stop])) ++stop;
    }
    if (start_offset < start) segments.push_back({-1, start_offset, start});
    segments.push_back({found, start, stop});
    start_offset = stop;
  }
  if (start_offset != decoded.size()) segments.push_back({-1, start_offset, decoded.size()});
  return segments;
}

}  // namespace attnscope
