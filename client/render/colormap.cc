#include "client/render/colormap.h"

#include <algorithm>
#include <cmath>

namespace attnscope::render {
namespace {

std::array<Rgb, kColorMapEntries> BuildTable() {
  const std::array<Rgb, 9>& control = YlOrBrControlColors();
  const int segments = static_cast<int>(control.size()) - 1;
  std::array<Rgb, kColorMapEntries> table;
  for (int i = 0; i < kColorMapEntries; ++i) {
    const double position = static_cast<double>(i) / (kColorMapEntries - 1) * segments;
    const int k = std::min(static_cast<int>(position), segments - 1);
    const double f = position - k;
    auto mix = [f](uint8_t a, uint8_t b) {
      return static_cast<uint8_t>(std::lround(a + (static_cast<double>(b) - a) * f));
    };
    table[i] = {mix(control[k].r, control[k + 1].r), mix(control[k].g, control[k + 1].g),
                mix(control[k].b, control[k + 1].b)};
  }
  return table;
}

}  // namespace

const std::array<Rgb, 9>& YlOrBrControlColors() {
  static constexpr std::array<Rgb, 9> kColors = {{{0xff, 0xff, 0xe5},
                                                  {0xff, 0xf7, 0xbc},
                                                  {0xfe, 0xe3, 0x91},
                                                  {0xfe, 0xc4, 0x4f},
                                                  {0xfe, 0x99, 0x29},
                                                  {0xec, 0x70, 0x14},
                                                  {0xcc, 0x4c, 0x02},
                                                  {0x99, 0x34, 0x04},
                                                  {0x66, 0x25, 0x06}}};
  return kColors;
}

Rgb YlOrBrEntry(int index) {
  static const std::array<Rgb, kColorMapEntries> kTable = BuildTable();
  return kTable[std::clamp(index, 0, kColorMapEntries - 1)];
}

Rgb YlOrBr(double t) {
  if (!(t > 0)) return YlOrBrEntry(0);
  if (t >= 1) return YlOrBrEntry(kColorMapEntries - 1);
  return YlOrBrEntry(static_cast<int>(t * kColorMapEntries));
}

}  // namespace attnscope::render
