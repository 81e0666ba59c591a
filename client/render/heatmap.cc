#include "client/render/heatmap.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <pango/pangocairo.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/render/colormap.h"
#include "common/status_macros.h"

namespace attnscope::render {
namespace {

struct Font {
  int px = kLabelFontPx;
  bool bold = false;
};

constexpr Font kTitleFont = {kTitleFontPx, true};
constexpr Font kPanelTitleFont = {kPanelTitleFontPx, false};
constexpr Font kLabelFont = {kLabelFontPx, false};
constexpr Font kTickFont = {kTickFontPx, false};

struct GObjectUnref {
  void operator()(void* object) const { g_object_unref(object); }
};
using LayoutPtr = std::unique_ptr<PangoLayout, GObjectUnref>;

struct SurfaceDestroy {
  void operator()(cairo_surface_t* surface) const { cairo_surface_destroy(surface); }
};
using SurfacePtr = std::unique_ptr<cairo_surface_t, SurfaceDestroy>;

struct ContextDestroy {
  void operator()(cairo_t* cr) const { cairo_destroy(cr); }
};
using ContextPtr = std::unique_ptr<cairo_t, ContextDestroy>;

// Metric hinting off: an image surface would otherwise round advances to whole pixels and the SVG
// surface not, so the two formats would lay the same text out to different widths.
const cairo_font_options_t* FontOptions() {
  static cairo_font_options_t* options = [] {
    cairo_font_options_t* created = cairo_font_options_create();
    cairo_font_options_set_hint_metrics(created, CAIRO_HINT_METRICS_OFF);
    cairo_font_options_set_hint_style(created, CAIRO_HINT_STYLE_NONE);
    // Grey rather than subpixel antialiasing: no colour fringes in a picture that is scaled.
    cairo_font_options_set_antialias(created, CAIRO_ANTIALIAS_GRAY);
    return created;
  }();
  return options;
}

// A layout of `text` for drawing on `cr` (with its current transformation).
LayoutPtr MakeLayout(cairo_t* cr, const std::string& text, Font font) {
  LayoutPtr layout(pango_cairo_create_layout(cr));
  pango_cairo_context_set_font_options(pango_layout_get_context(layout.get()), FontOptions());
  PangoFontDescription* description = pango_font_description_new();
  pango_font_description_set_family(description, kFontFamily);
  pango_font_description_set_absolute_size(description, font.px * PANGO_SCALE);
  pango_font_description_set_weight(description,
                                    font.bold ? PANGO_WEIGHT_BOLD : PANGO_WEIGHT_NORMAL);
  pango_layout_set_font_description(layout.get(), description);
  pango_font_description_free(description);
  pango_layout_context_changed(layout.get());
  pango_layout_set_text(layout.get(), text.data(), static_cast<int>(text.size()));
  return layout;
}

PangoRectangle LogicalExtents(PangoLayout* layout) {
  PangoRectangle logical;
  pango_layout_get_pixel_extents(layout, nullptr, &logical);
  return logical;
}

// Measures texts on a 1 x 1 scratch surface: pango needs a cairo context to resolve fonts.
class TextMeasure {
 public:
  TextMeasure()
      : surface_(cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1)),
        cr_(cairo_create(surface_.get())) {}

  // Logical width and height in pixels.
  std::pair<int, int> Size(const std::string& text, Font font) {
    LayoutPtr layout = MakeLayout(cr_.get(), text, font);
    const PangoRectangle logical = LogicalExtents(layout.get());
    return {logical.width, logical.height};
  }

  int UnknownGlyphs(const std::string& text, Font font) {
    LayoutPtr layout = MakeLayout(cr_.get(), text, font);
    return pango_layout_get_unknown_glyphs_count(layout.get());
  }

 private:
  SurfacePtr surface_;
  ContextPtr cr_;
};

// Ticks from 0 to vmax at the smallest step of 1, 2 or 5 times a power of ten that gives at most
// kMaxTicks of them, as matplotlib's colour bars are ticked; the labels have the step's decimals.
void ChooseTicks(double vmax, std::vector<double>* ticks, std::vector<std::string>* labels) {
  constexpr int kMaxTicks = 8;
  int exponent = static_cast<int>(std::floor(std::log10(vmax))) - 2;
  double step = 0;
  for (;; ++exponent) {
    for (double mantissa : {1.0, 2.0, 5.0}) {
      step = mantissa * std::pow(10.0, exponent);
      if (std::floor(vmax / step + 1e-9) + 1 <= kMaxTicks) break;
      step = 0;
    }
    if (step > 0) break;
  }
  const int decimals = std::max(0, -exponent);
  for (int k = 0; k * step <= vmax * (1 + 1e-9); ++k) {
    ticks->push_back(k * step);
    labels->push_back(absl::StrFormat("%.*f", decimals, k * step));
  }
}

enum class Align { kStart, kCenter, kEnd };

// A text to draw. (x, y) is its anchor: the point of the text's vertical centre line at its start,
// middle or end (`align`); a rotated text turns a quarter about it.
struct DrawnText {
  std::string css_class;
  int panel = -1;
  int index = -1;
  std::string text;
  Font font;
  double x = 0;
  double y = 0;
  Align align = Align::kStart;
  bool rotated = false;
  // Filled in when drawn, for the SVG's text layer: where pango put the start of the baseline,
  // relative to the anchor (before the rotation), and the logical width.
  double baseline_x = 0;
  double baseline_y = 0;
  double width = 0;
};

class Painter {
 public:
  explicit Painter(cairo_t* cr) : cr_(cr) {}

  void Text(DrawnText text) {
    cairo_save(cr_);
    cairo_translate(cr_, text.x, text.y);
    // Column labels read upwards, as matplotlib's rotation=90 tick labels do.
    if (text.rotated) cairo_rotate(cr_, -M_PI / 2);
    LayoutPtr layout = MakeLayout(cr_, text.text, text.font);
    const PangoRectangle logical = LogicalExtents(layout.get());
    double dx = 0;
    if (text.align == Align::kCenter) dx = -logical.width / 2.0;
    if (text.align == Align::kEnd) dx = -logical.width;
    const double top = -logical.height / 2.0 - logical.y;
    cairo_move_to(cr_, dx - logical.x, top);
    text.baseline_x = dx;
    text.baseline_y =
        top + pango_layout_get_baseline(layout.get()) / static_cast<double>(PANGO_SCALE);
    text.width = logical.width;
    cairo_set_source_rgb(cr_, 0, 0, 0);
    pango_cairo_show_layout(cr_, layout.get());
    cairo_restore(cr_);
    if (pango_layout_get_unknown_glyphs_count(layout.get()) > 0 &&
        std::find(unknown_.begin(), unknown_.end(), text.text) == unknown_.end()) {
      unknown_.push_back(text.text);
    }
    texts_.push_back(std::move(text));
  }

  const std::vector<DrawnText>& texts() const { return texts_; }
  std::vector<std::string> TakeUnknown() { return std::move(unknown_); }

 private:
  cairo_t* cr_;
  std::vector<DrawnText> texts_;
  std::vector<std::string> unknown_;
};

void SetColor(cairo_t* cr, Rgb color) {
  cairo_set_source_rgb(cr, color.r / 255.0, color.g / 255.0, color.b / 255.0);
}

void Draw(cairo_t* cr, const Heatmap& heatmap, const HeatmapLayout& layout, Painter* painter) {
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  const int rows = static_cast<int>(heatmap.row_labels.size());
  const int columns = static_cast<int>(heatmap.column_labels.size());
  if (!heatmap.title.empty()) {
    // Centred over the grids of the first row (a single panel's title sits over its grid, as
    // matplotlib's axes titles do), as far as the image allows.
    const Box& last = layout.grids[layout.panel_columns - 1];
    const double center = std::clamp((layout.grids[0].x + last.x + last.width) / 2.0,
                                     kMargin + layout.title_width / 2.0,
                                     layout.width - kMargin - layout.title_width / 2.0);
    painter->Text({"title", -1, -1, heatmap.title, kTitleFont, center,
                   kMargin + layout.title_height / 2.0, Align::kCenter});
  }
  for (size_t p = 0; p < heatmap.panels.size(); ++p) {
    const HeatmapPanel& panel = heatmap.panels[p];
    const Box& grid = layout.grids[p];
    const int panel_index = static_cast<int>(p);
    // Cells meet edge to edge on whole pixels; without antialiasing each keeps its exact colour.
    cairo_save(cr);
    cairo_set_antialias(cr, CAIRO_ANTIALIAS_NONE);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < columns; ++c) {
        const size_t index = static_cast<size_t>(r) * columns + c;
        SetColor(cr, !panel.masked.empty() && panel.masked[index]
                         ? kMaskedColor
                         : YlOrBr(panel.values[index] / layout.vmax));
        const Box cell = layout.Cell(panel_index, r, c);
        cairo_rectangle(cr, cell.x, cell.y, cell.width, cell.height);
        cairo_fill(cr);
      }
    }
    cairo_restore(cr);
    if (!panel.title.empty()) {
      painter->Text({"panel-title", panel_index, -1, panel.title, kPanelTitleFont,
                     grid.x + grid.width / 2.0,
                     grid.y - kPanelTitleGap - (layout.panel_title_height - kPanelTitleGap) / 2.0,
                     Align::kCenter});
    }
    for (int r = 0; r < rows; ++r) {
      painter->Text({"row-label", panel_index, r, heatmap.row_labels[r], kLabelFont,
                     static_cast<double>(grid.x - kLabelPad), grid.y + (r + 0.5) * layout.cell_size,
                     Align::kEnd});
    }
    for (int c = 0; c < columns; ++c) {
      painter->Text({"column-label", panel_index, c, heatmap.column_labels[c], kLabelFont,
                     grid.x + (c + 0.5) * layout.cell_size,
                     static_cast<double>(grid.y + grid.height + kLabelPad), Align::kEnd,
                     /*rotated=*/true});
    }
  }
  // The colour bar: the control colours as gradient stops, value 0 at the bottom.
  const Box& bar = layout.colorbar;
  cairo_pattern_t* gradient = cairo_pattern_create_linear(0, bar.y + bar.height, 0, bar.y);
  const auto& control = YlOrBrControlColors();
  for (size_t k = 0; k < control.size(); ++k) {
    cairo_pattern_add_color_stop_rgb(gradient, static_cast<double>(k) / (control.size() - 1),
                                     control[k].r / 255.0, control[k].g / 255.0,
                                     control[k].b / 255.0);
  }
  cairo_set_source(cr, gradient);
  cairo_rectangle(cr, bar.x, bar.y, bar.width, bar.height);
  cairo_fill(cr);
  cairo_pattern_destroy(gradient);
  cairo_set_source_rgb(cr, 0, 0, 0);
  cairo_set_line_width(cr, 1);
  for (size_t i = 0; i < layout.ticks.size(); ++i) {
    const double y = bar.y + bar.height * (1 - layout.ticks[i] / layout.vmax);
    // Half-pixel offset: a one-pixel line on a pixel row rather than across two.
    const double line_y = std::floor(y) + 0.5;
    cairo_move_to(cr, bar.x + bar.width, line_y);
    cairo_line_to(cr, bar.x + bar.width + kTickLength, line_y);
    cairo_stroke(cr);
    painter->Text({"tick-label", -1, static_cast<int>(i), layout.tick_labels[i], kTickFont,
                   static_cast<double>(bar.x + bar.width + kTickLength + kTickPad), y,
                   Align::kStart});
  }
}

cairo_status_t AppendToString(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

// Text for XML character data and attribute values. Characters XML 1.0 forbids (C0 controls other
// than tab, newline and carriage return) are dropped.
std::string XmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n' || c == '\r') {
          out += c;
        }
    }
  }
  return out;
}

std::string SvgTextLayer(const std::vector<DrawnText>& texts) {
  std::string out = absl::StrCat("<g class=\"text-layer\" fill=\"#000000\" fill-opacity=\"0\" ",
                                 "font-family=\"", kFontFamily, ", sans-serif\">\n");
  for (const DrawnText& text : texts) {
    absl::StrAppend(&out, "<text class=\"", text.css_class, "\"");
    if (text.panel >= 0) absl::StrAppend(&out, " data-panel=\"", text.panel, "\"");
    if (text.index >= 0) absl::StrAppend(&out, " data-index=\"", text.index, "\"");
    // At pango's baseline and stretched to pango's width, so that the invisible text covers the
    // drawn glyphs whichever font the viewer substitutes.
    if (text.rotated) {
      absl::StrAppend(
          &out, absl::StrFormat(" transform=\"translate(%g %g) rotate(-90)\"", text.x, text.y),
          absl::StrFormat(" x=\"%g\" y=\"%g\"", text.baseline_x, text.baseline_y));
    } else {
      absl::StrAppend(&out, absl::StrFormat(" x=\"%g\" y=\"%g\"", text.x + text.baseline_x,
                                            text.y + text.baseline_y));
    }
    absl::StrAppend(&out, " font-size=\"", text.font.px, "px\"",
                    text.font.bold ? " font-weight=\"bold\"" : "",
                    absl::StrFormat(" textLength=\"%g\"", text.width),
                    " lengthAdjust=\"spacingAndGlyphs\">", XmlEscape(text.text), "</text>\n");
  }
  out += "</g>\n";
  return out;
}

// Adds the document title after the opening <svg> tag and the text layer before the closing one.
absl::Status AddSvgText(const std::string& title, const std::vector<DrawnText>& texts,
                        std::string* svg) {
  const size_t svg_tag = svg->find("<svg");
  const size_t tag_end = svg_tag == std::string::npos ? svg_tag : svg->find('>', svg_tag);
  const size_t close = svg->rfind("</svg>");
  if (tag_end == std::string::npos || close == std::string::npos || close < tag_end) {
    return absl::InternalError(
        "SVG from cairo: expected an <svg> element, got a document without one");
  }
  svg->insert(close, SvgTextLayer(texts));
  if (!title.empty())
    svg->insert(tag_end + 1, absl::StrCat("\n<title>", XmlEscape(title), "</title>"));
  return absl::OkStatus();
}

absl::Status CairoError(const char* what, cairo_status_t status) {
  return absl::InternalError(
      absl::StrCat(what, ": cairo failed: ", cairo_status_to_string(status)));
}

}  // namespace

Box HeatmapLayout::Cell(int panel, int row, int column) const {
  const Box& grid = grids[panel];
  return {grid.x + column * cell_size, grid.y + row * cell_size, cell_size, cell_size};
}

absl::StatusOr<HeatmapLayout> LayoutHeatmap(const Heatmap& heatmap) {
  const size_t rows = heatmap.row_labels.size();
  const size_t columns = heatmap.column_labels.size();
  if (heatmap.panels.empty()) {
    return absl::InvalidArgumentError("heatmap: expected at least one panel, got none");
  }
  if (rows == 0 || columns == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heatmap: expected at least one row and one column label, got ", rows, " x ", columns));
  }
  for (size_t p = 0; p < heatmap.panels.size(); ++p) {
    const std::vector<float>& values = heatmap.panels[p].values;
    if (values.size() != rows * columns) {
      return absl::InvalidArgumentError(
          absl::StrCat("heatmap panel ", p, " '", heatmap.panels[p].title, "': expected ", rows,
                       " x ", columns, " = ", rows * columns, " values, got ", values.size()));
    }
    const std::vector<bool>& masked = heatmap.panels[p].masked;
    if (!masked.empty() && masked.size() != values.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "heatmap panel ", p, " '", heatmap.panels[p].title, "': expected no mask or ",
          values.size(), " mask flags, got ", masked.size()));
    }
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "heatmap panel ", p, " '", heatmap.panels[p].title, "': expected finite values, got ",
            values[i], " at row ", i / columns, ", column ", i % columns));
      }
    }
  }
  if (heatmap.vmax.has_value() && !(*heatmap.vmax > 0 && std::isfinite(*heatmap.vmax))) {
    return absl::InvalidArgumentError(absl::StrCat("heatmap vmax: expected a positive number, got ",
                                                   *heatmap.vmax, "; e.g. 1, or unset"));
  }
  if (heatmap.cell_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("heatmap cell_size: expected at least 1 pixel, got ", heatmap.cell_size));
  }
  if (heatmap.panel_columns < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heatmap panel_columns: expected 0 (automatic) or more, got ", heatmap.panel_columns));
  }

  HeatmapLayout layout;
  layout.cell_size = heatmap.cell_size;
  if (heatmap.vmax.has_value()) {
    layout.vmax = *heatmap.vmax;
  } else {
    float largest = 0;
    for (const HeatmapPanel& panel : heatmap.panels) {
      for (float value : panel.values) largest = std::max(largest, value);
    }
    layout.vmax = largest > 0 ? largest : 1;
  }
  ChooseTicks(layout.vmax, &layout.ticks, &layout.tick_labels);

  const int panels = static_cast<int>(heatmap.panels.size());
  layout.panel_columns =
      heatmap.panel_columns > 0
          ? std::min(heatmap.panel_columns, panels)
          : static_cast<int>(std::ceil(std::sqrt(static_cast<double>(panels)) - 1e-9));
  layout.panel_rows = (panels + layout.panel_columns - 1) / layout.panel_columns;

  TextMeasure measure;
  if (!heatmap.title.empty()) {
    std::tie(layout.title_width, layout.title_height) = measure.Size(heatmap.title, kTitleFont);
  }
  for (const HeatmapPanel& panel : heatmap.panels) {
    if (panel.title.empty()) continue;
    layout.panel_title_height =
        std::max(layout.panel_title_height,
                 measure.Size(panel.title, kPanelTitleFont).second + kPanelTitleGap);
  }
  for (const std::string& label : heatmap.row_labels) {
    layout.row_label_width =
        std::max(layout.row_label_width, measure.Size(label, kLabelFont).first);
  }
  for (const std::string& label : heatmap.column_labels) {
    layout.column_label_height =
        std::max(layout.column_label_height, measure.Size(label, kLabelFont).first);
  }
  for (const std::string& label : layout.tick_labels) {
    layout.tick_label_width =
        std::max(layout.tick_label_width, measure.Size(label, kTickFont).first);
  }

  // Sizes in 64 bits first: a long text times many panels must give an error, not overflow.
  const int64_t cell = heatmap.cell_size;
  const int64_t panel_width = layout.row_label_width + kLabelPad + columns * cell;
  const int64_t panel_height =
      layout.panel_title_height + rows * cell + kLabelPad + layout.column_label_height;
  const int64_t panels_width =
      layout.panel_columns * panel_width + (layout.panel_columns - 1) * int64_t{kPanelGap};
  const int64_t width =
      std::max<int64_t>(2 * kMargin + layout.title_width,
                        kMargin + panels_width + kColorbarGap + kColorbarWidth + kTickLength +
                            kTickPad + layout.tick_label_width + kMargin);
  const int64_t title_block = heatmap.title.empty() ? 0 : layout.title_height + kTitleGap;
  const int64_t height = kMargin + title_block + layout.panel_rows * panel_height +
                         (layout.panel_rows - 1) * int64_t{kPanelGap} + kMargin;
  if (width > kMaxImageSide || height > kMaxImageSide) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heatmap: expected at most ", kMaxImageSide, " pixels a side, got ", width, " x ", height,
        " (", panels, " panels of ", rows, " x ", columns,
        " tokens); draw fewer panels (--layers, --heads, --aggregate mean) or fewer tokens "
        "(--window, shorter text)"));
  }
  layout.width = static_cast<int>(width);
  layout.height = static_cast<int>(height);
  layout.panel_width = static_cast<int>(panel_width);
  layout.panel_height = static_cast<int>(panel_height);

  const int panels_top = kMargin + static_cast<int>(title_block);
  for (int p = 0; p < panels; ++p) {
    const int x = kMargin + (p % layout.panel_columns) * (layout.panel_width + kPanelGap);
    const int y = panels_top + (p / layout.panel_columns) * (layout.panel_height + kPanelGap);
    layout.grids.push_back({x + layout.row_label_width + kLabelPad, y + layout.panel_title_height,
                            static_cast<int>(columns * cell), static_cast<int>(rows * cell)});
  }
  const Box& last = layout.grids.back();
  layout.colorbar = {kMargin + static_cast<int>(panels_width) + kColorbarGap, layout.grids[0].y,
                     kColorbarWidth, last.y + last.height - layout.grids[0].y};
  return layout;
}

absl::StatusOr<ImageFormat> ImageFormatFromPath(const std::string& path) {
  const size_t dot = path.rfind('.');
  const std::string extension =
      dot == std::string::npos ? "" : absl::AsciiStrToLower(path.substr(dot));
  if (extension == ".png") return ImageFormat::kPng;
  if (extension == ".svg") return ImageFormat::kSvg;
  return absl::InvalidArgumentError(absl::StrCat("heatmap file '", path,
                                                 "': expected a name ending in .png or .svg, got '",
                                                 extension, "'; the extension picks the format"));
}

absl::StatusOr<RenderedHeatmap> RenderHeatmap(const Heatmap& heatmap, ImageFormat format) {
  RenderedHeatmap rendered;
  ATTNSCOPE_ASSIGN_OR_RETURN(rendered.layout, LayoutHeatmap(heatmap));
  const HeatmapLayout& layout = rendered.layout;
  SurfacePtr surface(
      format == ImageFormat::kPng
          ? cairo_image_surface_create(CAIRO_FORMAT_RGB24, layout.width, layout.height)
          : cairo_svg_surface_create_for_stream(AppendToString, &rendered.data, layout.width,
                                                layout.height));
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS) {
    return CairoError("heatmap surface", cairo_surface_status(surface.get()));
  }
  if (format == ImageFormat::kSvg) {
    // Pixels, so that the SVG's width and height are the PNG's.
    cairo_svg_surface_set_document_unit(surface.get(), CAIRO_SVG_UNIT_PX);
  }
  ContextPtr cr(cairo_create(surface.get()));
  Painter painter(cr.get());
  Draw(cr.get(), heatmap, layout, &painter);
  if (cairo_status(cr.get()) != CAIRO_STATUS_SUCCESS) {
    return CairoError("heatmap drawing", cairo_status(cr.get()));
  }
  cr.reset();
  rendered.texts_with_unknown_glyphs = painter.TakeUnknown();
  if (format == ImageFormat::kPng) {
    cairo_surface_flush(surface.get());
    const cairo_status_t status =
        cairo_surface_write_to_png_stream(surface.get(), AppendToString, &rendered.data);
    if (status != CAIRO_STATUS_SUCCESS) return CairoError("heatmap PNG", status);
    return rendered;
  }
  cairo_surface_finish(surface.get());
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS) {
    return CairoError("heatmap SVG", cairo_surface_status(surface.get()));
  }
  ATTNSCOPE_RETURN_IF_ERROR(AddSvgText(heatmap.title, painter.texts(), &rendered.data));
  return rendered;
}

absl::StatusOr<RenderedHeatmap> WriteHeatmap(const Heatmap& heatmap, const std::string& path) {
  ATTNSCOPE_ASSIGN_OR_RETURN(const ImageFormat format, ImageFormatFromPath(path));
  ATTNSCOPE_ASSIGN_OR_RETURN(RenderedHeatmap rendered, RenderHeatmap(heatmap, format));
  std::FILE* file = std::fopen(path.c_str(), "wb");
  int error = file == nullptr ? errno : 0;
  if (file != nullptr) {
    if (std::fwrite(rendered.data.data(), 1, rendered.data.size(), file) != rendered.data.size()) {
      error = errno;
    }
    if (std::fclose(file) != 0 && error == 0) error = errno;
  }
  if (error != 0) {
    const std::string message =
        absl::StrCat("heatmap file '", path, "': cannot write it: ", std::strerror(error),
                     "; check that its directory exists and is writable");
    if (error == ENOENT || error == ENOTDIR) return absl::NotFoundError(message);
    if (error == EACCES || error == EPERM || error == EROFS) {
      return absl::PermissionDeniedError(message);
    }
    return absl::InternalError(message);
  }
  return rendered;
}

int UnknownGlyphCount(const std::string& text, int font_px) {
  return TextMeasure().UnknownGlyphs(text, {font_px, false});
}

}  // namespace attnscope::render
