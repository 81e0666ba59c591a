// Attention heatmaps as PNG and SVG files, drawn like the transformer tutorials' seaborn plots
// (sns.heatmap(attention, xticklabels=tokens, yticklabels=tokens, cmap="YlOrBr")): one or more
// panels of square cells, query tokens down the rows, key tokens across the columns (their labels
// rotated a quarter turn, reading upwards and ending at the grid), a title, and one colour bar with
// tick values shared by every panel.
//
// This library knows nothing of attnscope's protocol (client/attention_display.h turns answers into
// a Heatmap). It draws with cairo and lays out text with pango, from Debian's packages. Labels are
// set in Noto Sans CJK (Debian's fonts-noto-cjk, installed by scripts/install-deps.sh), which
// covers Latin with Vietnamese diacritics and Hangul; every text drawn is checked with
// pango_layout_get_unknown_glyphs_count and the texts with missing glyphs (drawn as boxes) are
// reported.
//
// PNG and SVG come from the same drawing code, so they have the same geometry. cairo's SVG surface
// writes glyphs as paths (the picture then looks the same in any viewer, with or without the
// fonts), which leaves no text in the file; so the SVG also carries every label as a transparent
// <text> element over its drawn glyphs, marked class="title", "panel-title", "row-label",
// "column-label" or "tick-label" with data-panel / data-index attributes: the labels stay
// searchable, selectable and readable by screen readers, and a test can read them back. The
// figure title is also the document's <title>.
#ifndef ATTNSCOPE_CLIENT_RENDER_HEATMAP_H_
#define ATTNSCOPE_CLIENT_RENDER_HEATMAP_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/render/colormap.h"

namespace attnscope::render {

// Layout constants, in pixels (PNG pixels; SVG px user units, 1:1).
inline constexpr int kMargin = 16;           // around everything
inline constexpr int kTitleGap = 12;         // below the title
inline constexpr int kPanelGap = 24;         // between panels, across and down
inline constexpr int kLabelPad = 6;          // between a grid and its row or column labels
inline constexpr int kPanelTitleGap = 6;     // between a panel's title and its grid
inline constexpr int kColorbarGap = 24;      // between the last panel column and the colour bar
inline constexpr int kColorbarWidth = 18;    // the colour bar's width
inline constexpr int kTickLength = 4;        // colour bar tick marks
inline constexpr int kTickPad = 4;           // between a tick mark and its value
inline constexpr int kDefaultCellSize = 28;  // side of a cell
// Font sizes in pixels (absolute sizes, independent of any resolution).
inline constexpr int kTitleFontPx = 16;
inline constexpr int kPanelTitleFontPx = 13;
inline constexpr int kLabelFontPx = 12;
inline constexpr int kTickFontPx = 11;
// The font family of every text (fontconfig falls back per character where it lacks a glyph).
inline constexpr char kFontFamily[] = "Noto Sans CJK KR";
// The colour of masked cells (HeatmapPanel::masked), the dashboard's #d9d9d9.
inline constexpr Rgb kMaskedColor = {0xd9, 0xd9, 0xd9};
// cairo's image surfaces are limited to 32767 pixels a side.
inline constexpr int kMaxImageSide = 32767;

// One grid of values.
struct HeatmapPanel {
  // Shown centred above the grid, e.g. "head 2"; empty for none.
  std::string title;
  // row_labels.size() x column_labels.size() values, row-major (row r = query token r). Finite;
  // values below 0 take the lightest colour.
  std::vector<float> values;
  // Empty, or one flag per value: true for a cell the model's mask hid (a key after the query in a
  // causal model, or outside a layer's sliding window), drawn kMaskedColor instead of its value's
  // colour (as the dashboard draws them), so that it does not read as attention the model could
  // have paid and did not.
  std::vector<bool> masked;
};

// What to draw. Every panel has the same rows and columns.
struct Heatmap {
  // Above everything, e.g. "default: layer 3, mean of heads 0-3"; empty for none.
  std::string title;
  // One label per row, top to bottom (query tokens), and per column, left to right (key tokens).
  std::vector<std::string> row_labels;
  std::vector<std::string> column_labels;
  // At least one, drawn left to right, then top to bottom.
  std::vector<HeatmapPanel> panels;
  // Panels per row of the figure; 0 = ceil(sqrt(panels)), so that 4 heads form a 2 x 2 grid.
  int panel_columns = 0;
  // The value drawn darkest: value v is drawn in YlOrBr(v / vmax) (client/render/colormap.h), so
  // the scale runs from 0 to vmax. Unset: the largest value of all panels (1 if none is above 0),
  // as seaborn scales to the data; set 1 to compare pictures on the absolute probability scale.
  std::optional<double> vmax;
  // Side of a cell in pixels, at least 1.
  int cell_size = kDefaultCellSize;
};

// A rectangle in pixels: x, y of its top-left corner, then its size.
struct Box {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

// Where everything goes. Sizes in pixels; text extents are pango's logical extents of the texts
// in their fonts, 0 when there is no such text.
//
//   panel_width  = row_label_width + kLabelPad + columns * cell_size
//   panel_height = panel_title_height + rows * cell_size + kLabelPad + column_label_height
//                  (panel_title_height = text height + kPanelTitleGap when any panel has a title)
//   width  = max(2 * kMargin + title_width,
//                kMargin + panel_columns * panel_width + (panel_columns - 1) * kPanelGap
//                + kColorbarGap + kColorbarWidth + kTickLength + kTickPad + tick_label_width
//                + kMargin)
//   height = kMargin + (title_height + kTitleGap when there is a title)
//            + panel_rows * panel_height + (panel_rows - 1) * kPanelGap + kMargin
//
// Panel p sits in figure row p / panel_columns and column p % panel_columns; its grid is
// grids[p], with cell (r, c) at (grid.x + c * cell_size, grid.y + r * cell_size). The colour bar
// spans from the top of the first row's grids to the bottom of the last row's, value v at
// y = colorbar.y + colorbar.height * (1 - v / vmax).
struct HeatmapLayout {
  int width = 0;
  int height = 0;
  int cell_size = 0;
  double vmax = 1;
  int panel_columns = 0;
  int panel_rows = 0;
  int panel_width = 0;
  int panel_height = 0;
  int title_width = 0;
  int title_height = 0;
  int panel_title_height = 0;
  // The widest row label and the widest column label (its height once rotated).
  int row_label_width = 0;
  int column_label_height = 0;
  int tick_label_width = 0;
  // One per panel: the rectangle of its cells.
  std::vector<Box> grids;
  Box colorbar;
  // Colour bar tick values, ascending from 0, at most vmax: the smallest step of 1, 2 or 5 times a
  // power of ten that gives at most 8 ticks. Their labels show as many decimals as the step needs.
  std::vector<double> ticks;
  std::vector<std::string> tick_labels;

  // The rectangle of cell (row, column) of panel `panel` (all in range; not checked).
  Box Cell(int panel, int row, int column) const;
};

// Where everything of `heatmap` goes. InvalidArgument: no panels, no rows or no columns, a panel
// whose value count is not rows x columns, a non-finite value, a vmax that is not positive, a
// cell_size below 1, panel_columns below 0, or an image over kMaxImageSide pixels a side (the
// message gives the size and the ways to make it smaller).
absl::StatusOr<HeatmapLayout> LayoutHeatmap(const Heatmap& heatmap);

enum class ImageFormat { kPng, kSvg };

// The format named by the extension of `path`: ".png" or ".svg", in any case. InvalidArgument
// otherwise, naming both.
absl::StatusOr<ImageFormat> ImageFormatFromPath(const std::string& path);

struct RenderedHeatmap {
  // The file's bytes: a PNG (8-bit RGB, opaque) or an SVG document (UTF-8).
  std::string data;
  HeatmapLayout layout;
  // The texts (title, panel titles, labels, tick values) in which pango found characters that no
  // installed font has, each once, in drawing order. Empty when every glyph was found.
  std::vector<std::string> texts_with_unknown_glyphs;
};

// Draws `heatmap` into an image of `format`. The errors of LayoutHeatmap; Internal when cairo
// fails.
absl::StatusOr<RenderedHeatmap> RenderHeatmap(const Heatmap& heatmap, ImageFormat format);

// RenderHeatmap in the format of `path`'s extension, then writes the file. InvalidArgument for
// another extension; PermissionDenied / NotFound / Internal when the file cannot be written (the
// message names the path and the system's reason).
absl::StatusOr<RenderedHeatmap> WriteHeatmap(const Heatmap& heatmap, const std::string& path);

// How many characters of `text` pango finds in no installed font when it sets `text` in
// kFontFamily at `font_px` pixels (the count pango_layout_get_unknown_glyphs_count reports).
int UnknownGlyphCount(const std::string& text, int font_px = kLabelFontPx);

}  // namespace attnscope::render

#endif  // ATTNSCOPE_CLIENT_RENDER_HEATMAP_H_
