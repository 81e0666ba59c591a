#include "models/tokenizers/precompiled_charsmap.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {
namespace {

// A Darts-clone unit: a node's label (bit 31 set for a value unit, so that it never matches a
// byte), whether a leaf hangs off it, the XOR offset of its children, or a leaf's value.
bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1) == 1; }
uint32_t Value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

uint32_t ReadLittleEndian32(std::string_view bytes, size_t at) {
  uint32_t value = 0;
  for (int k = 3; k >= 0; --k) value = (value << 8) | static_cast<unsigned char>(bytes[at + k]);
  return value;
}

// The library's `replace` (normalizers/precompiled.rs): `replacement` for `replaced` characters.
void AppendReplacement(std::string_view replacement, int64_t replaced,
                       std::vector<PrecompiledCharsmap::Change>* changes) {
  // Parse checked that every replacement in the pool is UTF-8.
  const std::vector<char32_t> chars = unicode::DecodeUtf8(replacement)->code_points;
  for (char32_t c : chars) changes->push_back({c, 0});
  const int64_t diff = static_cast<int64_t>(chars.size()) - replaced;
  if (diff > 0) {
    for (int64_t k = 0; k < diff; ++k) changes->at(changes->size() - 1 - k).change = 1;
  } else if (diff < 0 && !changes->empty()) {
    // When nothing replaces the characters, the change before them, whatever it was, removes them
    // (and with none before, nothing does: the next character then takes their alignment).
    changes->back().change += diff;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>> PrecompiledCharsmap::Parse(
    std::string_view bytes) {
  if (bytes.size() < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a uint32 trie size, a trie and its pool of replacements, got ",
                     bytes.size(), " bytes"));
  }
  const uint32_t trie_bytes = ReadLittleEndian32(bytes, 0);
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > bytes.size() - 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a trie size that is a non-zero multiple of 4 and at most the ",
                     bytes.size() - 4, " bytes after it, got ", trie_bytes));
  }
  std::vector<uint32_t> units(trie_bytes / 4);
  for (size_t k = 0; k < units.size(); ++k) units[k] = ReadLittleEndian32(bytes, 4 + 4 * k);
  std::string pool(bytes.substr(4 + trie_bytes));
  if (absl::Status utf8 = unicode::CheckUtf8(pool); !utf8.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected replacements in UTF-8 after the trie, got ", utf8.message()));
  }

  // Every node a lookup can reach, so that a lookup never leaves the array or the pool: from the
  // root, each byte's child is the unit at (node ^ offset) ^ byte whose label is that byte.
  const size_t size = units.size();
  std::vector<bool> visited(size, false);
  std::vector<uint32_t> stack = {Offset(units[0])};
  while (!stack.empty()) {
    const uint32_t base = stack.back();
    stack.pop_back();
    for (uint32_t byte = 1; byte < 256; ++byte) {
      const uint32_t child = base ^ byte;
      if (child >= size || Label(units[child]) != byte || visited[child]) continue;
      visited[child] = true;
      const uint32_t next = child ^ Offset(units[child]);
      if (HasLeaf(units[child])) {
        if (next >= size) {
          return absl::InvalidArgumentError(
              absl::StrCat("expected a trie whose leaves are inside its ", size,
                           " units, got unit ", child, " with its leaf at ", next));
        }
        const uint32_t value = Value(units[next]);
        // A replacement starts inside the pool, at the start of a character.
        if (value >= pool.size() || (static_cast<unsigned char>(pool[value]) & 0xC0) == 0x80) {
          return absl::InvalidArgumentError(
              absl::StrCat("expected leaves that point at a replacement of the ", pool.size(),
                           "-byte pool, got ", value, " at unit ", next));
        }
      }
      stack.push_back(next);
    }
  }
  return std::unique_ptr<PrecompiledCharsmap>(
      new PrecompiledCharsmap(std::move(units), std::move(pool)));
}

std::optional<std::string_view> PrecompiledCharsmap::Transform(std::string_view key) const {
  uint32_t node = Offset(units_[0]);
  for (const char k : key) {
    const auto byte = static_cast<unsigned char>(k);
    // spm_precompiled's search ends at a NUL, as the C string of SentencePiece would.
    if (byte == 0) break;
    node ^= byte;
    // Parse visited every reachable node; anything else is no match.
    if (node >= units_.size() || Label(units_[node]) != byte) return std::nullopt;
    const uint32_t unit = units_[node];
    node ^= Offset(unit);
    if (HasLeaf(unit)) {
      // The shortest prefix, as the library takes the first result of its search.
      const std::string_view rest = std::string_view(pool_).substr(Value(units_[node]));
      return rest.substr(0, rest.find('\0'));
    }
  }
  return std::nullopt;
}

std::vector<PrecompiledCharsmap::Change> PrecompiledCharsmap::Changes(
    const std::vector<char32_t>& text) const {
  std::vector<Change> changes;
  changes.reserve(text.size());
  const std::vector<size_t> breaks = unicode::GraphemeBreaks(text);
  std::string utf8;
  for (size_t g = 0; g + 1 < breaks.size(); ++g) {
    utf8.clear();
    for (size_t k = breaks[g]; k < breaks[g + 1]; ++k) unicode::AppendUtf8(text[k], &utf8);
    if (utf8.size() < 6) {
      if (std::optional<std::string_view> replacement = Transform(utf8)) {
        AppendReplacement(*replacement, static_cast<int64_t>(breaks[g + 1] - breaks[g]), &changes);
        continue;
      }
    }
    for (size_t k = breaks[g]; k < breaks[g + 1]; ++k) {
      utf8.clear();
      unicode::AppendUtf8(text[k], &utf8);
      if (std::optional<std::string_view> replacement = Transform(utf8)) {
        AppendReplacement(*replacement, 1, &changes);
      } else {
        changes.push_back({text[k], 0});
      }
    }
  }
  return changes;
}

}  // namespace attnscope
