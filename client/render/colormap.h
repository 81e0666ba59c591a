// The YlOrBr colour map exactly as matplotlib builds it, so that attnscope's heatmaps read like the
// tutorials' seaborn plots (sns.heatmap(..., cmap="YlOrBr")).
//
// matplotlib's YlOrBr is ColorBrewer's nine-class YlOrBr (#ffffe5 ... #662506, lightest first)
// placed evenly over [0, 1] and sampled into a 256-entry lookup table: entry i is the linear
// interpolation of the control colours at i / 255. A value t in [0, 1] takes entry
// min(floor(t * 256), 255). The table is kept here rather than taken from a library: it is nine
// published colours and one interpolation rule.
#ifndef ATTNSCOPE_CLIENT_RENDER_COLORMAP_H_
#define ATTNSCOPE_CLIENT_RENDER_COLORMAP_H_

#include <array>
#include <cstdint>

namespace attnscope::render {

// An sRGB colour, 8 bits per channel.
struct Rgb {
  uint8_t r = 0;
  uint8_t g = 0;
  uint8_t b = 0;

  bool operator==(const Rgb& other) const { return r == other.r && g == other.g && b == other.b; }
  bool operator!=(const Rgb& other) const { return !(*this == other); }
};

// Entries in the lookup table, as matplotlib's default (rcParams["image.lut"]).
inline constexpr int kColorMapEntries = 256;

// ColorBrewer's nine YlOrBr colours, lightest first; control colour k sits at t = k / 8.
const std::array<Rgb, 9>& YlOrBrControlColors();

// Entry `index` of the 256-entry table (clamped to [0, 255]); each channel is the interpolated
// value rounded to the nearest integer.
Rgb YlOrBrEntry(int index);

// The colour of t (a value already scaled to [0, 1]: value / top of the scale). t below 0 or NaN
// gives the lightest entry, t of 1 or more the darkest, as matplotlib clips.
Rgb YlOrBr(double t);

}  // namespace attnscope::render

#endif  // ATTNSCOPE_CLIENT_RENDER_COLORMAP_H_
