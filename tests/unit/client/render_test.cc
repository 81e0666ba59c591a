// client/render (colour map, layout, PNG and SVG output) and client/attention_display (answers as
// heatmaps and text), without a server. The colour table is checked against the nine published
// ColorBrewer colours and the documented interpolation rule re-implemented here; pictures are read
// back with cairo and their cells sampled.
#include <cairo.h>
#include <pango/pangocairo.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/attention_display.h"
#include "client/render/colormap.h"
#include "client/render/heatmap.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnscope {
namespace {

using render::Heatmap;
using render::HeatmapLayout;
using render::Rgb;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kVietnamese[] = "Tôi yêu Việt Nam quá";

Rgb Hex(uint32_t hex) {
  return {static_cast<uint8_t>(hex >> 16), static_cast<uint8_t>(hex >> 8),
          static_cast<uint8_t>(hex)};
}

std::string Describe(Rgb color) {
  return absl::StrFormat("#%02x%02x%02x", color.r, color.g, color.b);
}

TEST(ColorMapTest, IsColorBrewersYlOrBrInMatplotlibsTable) {
  // ColorBrewer's nine-class YlOrBr, as matplotlib's _cm.py lists it (as fractions of 255).
  const std::vector<uint32_t> published = {0xffffe5, 0xfff7bc, 0xfee391, 0xfec44f, 0xfe9929,
                                           0xec7014, 0xcc4c02, 0x993404, 0x662506};
  for (size_t k = 0; k < published.size(); ++k) {
    EXPECT_EQ(render::YlOrBrControlColors()[k], Hex(published[k])) << k;
  }
  EXPECT_EQ(render::YlOrBrEntry(0), Hex(0xffffe5));
  EXPECT_EQ(render::YlOrBrEntry(255), Hex(0x662506));
  // Entry i interpolates linearly at i / 255 between the control colours placed at k / 8.
  for (int i = 0; i < 256; ++i) {
    const double x = i / 255.0 * 8;
    const int k = std::min(static_cast<int>(x), 7);
    const Rgb a = Hex(published[k]);
    const Rgb b = Hex(published[k + 1]);
    const double f = x - k;
    const Rgb expected = {static_cast<uint8_t>(std::lround(a.r + (b.r - a.r) * f)),
                          static_cast<uint8_t>(std::lround(a.g + (b.g - a.g) * f)),
                          static_cast<uint8_t>(std::lround(a.b + (b.b - a.b) * f))};
    EXPECT_EQ(render::YlOrBrEntry(i), expected) << i;
  }
  // Darker with every entry (sum of channels never rises).
  for (int i = 1; i < 256; ++i) {
    const Rgb a = render::YlOrBrEntry(i - 1);
    const Rgb b = render::YlOrBrEntry(i);
    EXPECT_LE(b.r + b.g + b.b, a.r + a.g + a.b) << i;
  }
}

TEST(ColorMapTest, ValuesTakeMatplotlibsEntry) {
  EXPECT_EQ(render::YlOrBr(0), render::YlOrBrEntry(0));
  EXPECT_EQ(render::YlOrBr(-0.5), render::YlOrBrEntry(0));
  EXPECT_EQ(render::YlOrBr(std::nan("")), render::YlOrBrEntry(0));
  EXPECT_EQ(render::YlOrBr(1), render::YlOrBrEntry(255));
  EXPECT_EQ(render::YlOrBr(3), render::YlOrBrEntry(255));
  EXPECT_EQ(render::YlOrBr(0.5), render::YlOrBrEntry(128));
  EXPECT_EQ(render::YlOrBr(127.999 / 256), render::YlOrBrEntry(127));
  EXPECT_EQ(render::YlOrBr(255.5 / 256), render::YlOrBrEntry(255));
}

// A 2-panel heatmap with distinct values, labels in Vietnamese and Korean.
Heatmap Example() {
  Heatmap heatmap;
  heatmap.title = "example: layer 1";
  heatmap.row_labels = {"[CLS]", "Tôi", "Việt", "랭"};
  heatmap.column_labels = {"[CLS]", "Tôi", "yêu", "Việt", "Nam", "[SEP]"};
  for (int p = 0; p < 2; ++p) {
    render::HeatmapPanel panel;
    panel.title = absl::StrCat("head ", p);
    for (int i = 0; i < 24; ++i) panel.values.push_back(std::fmod(0.037f * (i + 7 * p), 0.8f));
    heatmap.panels.push_back(panel);
  }
  return heatmap;
}

int TextWidth(const std::string& text, int px, bool bold) {
  cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
  cairo_t* cr = cairo_create(surface);
  cairo_font_options_t* options = cairo_font_options_create();
  cairo_font_options_set_hint_metrics(options, CAIRO_HINT_METRICS_OFF);
  cairo_font_options_set_hint_style(options, CAIRO_HINT_STYLE_NONE);
  PangoLayout* layout = pango_cairo_create_layout(cr);
  pango_cairo_context_set_font_options(pango_layout_get_context(layout), options);
  PangoFontDescription* font = pango_font_description_from_string(render::kFontFamily);
  pango_font_description_set_absolute_size(font, px * PANGO_SCALE);
  if (bold) pango_font_description_set_weight(font, PANGO_WEIGHT_BOLD);
  pango_layout_set_font_description(layout, font);
  pango_layout_context_changed(layout);
  pango_layout_set_text(layout, text.data(), static_cast<int>(text.size()));
  PangoRectangle logical;
  pango_layout_get_pixel_extents(layout, nullptr, &logical);
  pango_font_description_free(font);
  g_object_unref(layout);
  cairo_font_options_destroy(options);
  cairo_destroy(cr);
  cairo_surface_destroy(surface);
  return logical.width;
}

TEST(HeatmapLayoutTest, FollowsTheDocumentedFormula) {
  const Heatmap heatmap = Example();
  absl::StatusOr<HeatmapLayout> layout = render::LayoutHeatmap(heatmap);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->panel_columns, 2);  // ceil(sqrt(2))
  EXPECT_EQ(layout->panel_rows, 1);
  EXPECT_FLOAT_EQ(layout->vmax, *std::max_element(heatmap.panels[1].values.begin(),
                                                  heatmap.panels[1].values.end()));
  // The text extents are pango's, measured here independently.
  int row_label_width = 0;
  for (const std::string& label : heatmap.row_labels) {
    row_label_width = std::max(row_label_width, TextWidth(label, render::kLabelFontPx, false));
  }
  int column_label_height = 0;
  for (const std::string& label : heatmap.column_labels) {
    column_label_height =
        std::max(column_label_height, TextWidth(label, render::kLabelFontPx, false));
  }
  EXPECT_EQ(layout->row_label_width, row_label_width);
  EXPECT_EQ(layout->column_label_height, column_label_height);
  EXPECT_EQ(layout->title_width, TextWidth(heatmap.title, render::kTitleFontPx, true));
  const int cell = render::kDefaultCellSize;
  const int panel_width = row_label_width + render::kLabelPad + 6 * cell;
  const int panel_height =
      layout->panel_title_height + 4 * cell + render::kLabelPad + column_label_height;
  EXPECT_EQ(layout->width, render::kMargin + 2 * panel_width + render::kPanelGap +
                               render::kColorbarGap + render::kColorbarWidth + render::kTickLength +
                               render::kTickPad + layout->tick_label_width + render::kMargin);
  EXPECT_EQ(layout->height, render::kMargin + layout->title_height + render::kTitleGap +
                                panel_height + render::kMargin);
  ASSERT_EQ(layout->grids.size(), 2u);
  EXPECT_EQ(layout->grids[1].x - layout->grids[0].x, panel_width + render::kPanelGap);
  EXPECT_EQ(layout->grids[0].width, 6 * cell);
  EXPECT_EQ(layout->grids[0].height, 4 * cell);
  EXPECT_EQ(layout->colorbar.y, layout->grids[0].y);
  EXPECT_EQ(layout->colorbar.height, layout->grids[0].height);
}

TEST(HeatmapLayoutTest, PanelsWrapIntoRows) {
  Heatmap heatmap = Example();
  heatmap.panels.push_back(heatmap.panels[0]);
  heatmap.panels.push_back(heatmap.panels[0]);
  heatmap.panels.push_back(heatmap.panels[0]);
  absl::StatusOr<HeatmapLayout> layout = render::LayoutHeatmap(heatmap);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->panel_columns, 3);  // ceil(sqrt(5))
  EXPECT_EQ(layout->panel_rows, 2);
  EXPECT_EQ(layout->grids[3].x, layout->grids[0].x);
  EXPECT_EQ(layout->grids[3].y - layout->grids[0].y, layout->panel_height + render::kPanelGap);
  EXPECT_EQ(layout->colorbar.height,
            layout->grids[4].y + layout->grids[4].height - layout->grids[0].y);
  heatmap.panel_columns = 5;
  layout = render::LayoutHeatmap(heatmap);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->panel_rows, 1);
}

TEST(HeatmapLayoutTest, TicksAreRoundSteps) {
  Heatmap heatmap = Example();
  for (const auto& [vmax, labels] : std::vector<std::pair<double, std::vector<std::string>>>{
           {0.52, {"0.0", "0.1", "0.2", "0.3", "0.4", "0.5"}},
           {1.0, {"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
           {0.3, {"0.00", "0.05", "0.10", "0.15", "0.20", "0.25", "0.30"}},
           {0.042, {"0.00", "0.01", "0.02", "0.03", "0.04"}},
           {7, {"0", "1", "2", "3", "4", "5", "6", "7"}}}) {
    heatmap.vmax = vmax;
    absl::StatusOr<HeatmapLayout> layout = render::LayoutHeatmap(heatmap);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->tick_labels, labels) << vmax;
    ASSERT_EQ(layout->ticks.size(), labels.size());
    for (size_t i = 0; i < labels.size(); ++i) {
      EXPECT_NEAR(layout->ticks[i], std::stod(labels[i]), 1e-12);
    }
  }
}

TEST(HeatmapLayoutTest, RefusesWhatItCannotDraw) {
  Heatmap heatmap = Example();
  heatmap.panels[1].values.pop_back();
  EXPECT_THAT(render::LayoutHeatmap(heatmap).status().message(),
              HasSubstr("expected 4 x 6 = 24 values, got 23"));
  heatmap = Example();
  heatmap.panels[0].values[3] = std::nanf("");
  EXPECT_THAT(render::LayoutHeatmap(heatmap).status().message(),
              HasSubstr("expected finite values, got nan at row 0, column 3"));
  heatmap = Example();
  heatmap.vmax = 0;
  EXPECT_THAT(render::LayoutHeatmap(heatmap).status().message(), HasSubstr("vmax"));
  heatmap = Example();
  heatmap.panels.clear();
  EXPECT_FALSE(render::LayoutHeatmap(heatmap).ok());
  // 1200 tokens of 28 pixels: over cairo's 32767-pixel limit, with the fixes named.
  heatmap = Example();
  heatmap.row_labels.assign(1200, "w");
  heatmap.column_labels.assign(1200, "w");
  heatmap.panels.resize(1);
  heatmap.panels[0].values.assign(1200 * 1200, 0.5f);
  const absl::Status status = render::LayoutHeatmap(heatmap).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("expected at most 32767 pixels a side"));
  EXPECT_THAT(status.message(), HasSubstr("--window"));
  EXPECT_EQ(render::ImageFormatFromPath("a/b.PNG").value(), render::ImageFormat::kPng);
  EXPECT_EQ(render::ImageFormatFromPath("b.svg").value(), render::ImageFormat::kSvg);
  EXPECT_THAT(render::ImageFormatFromPath("b.jpg").status().message(),
              HasSubstr("expected a name ending in .png or .svg, got '.jpg'"));
}

struct PngReader {
  std::string data;
  size_t offset = 0;
};

cairo_status_t ReadPng(void* closure, unsigned char* out, unsigned int length) {
  auto* reader = static_cast<PngReader*>(closure);
  if (reader->offset + length > reader->data.size()) return CAIRO_STATUS_READ_ERROR;
  std::memcpy(out, reader->data.data() + reader->offset, length);
  reader->offset += length;
  return CAIRO_STATUS_SUCCESS;
}

Rgb Pixel(cairo_surface_t* image, int x, int y) {
  const unsigned char* row =
      cairo_image_surface_get_data(image) + y * cairo_image_surface_get_stride(image);
  uint32_t pixel;
  std::memcpy(&pixel, row + 4 * x, 4);
  return {static_cast<uint8_t>(pixel >> 16), static_cast<uint8_t>(pixel >> 8),
          static_cast<uint8_t>(pixel)};
}

TEST(HeatmapRenderTest, PngCellsHaveTheColoursOfTheirValues) {
  const Heatmap heatmap = Example();
  absl::StatusOr<render::RenderedHeatmap> rendered =
      render::RenderHeatmap(heatmap, render::ImageFormat::kPng);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_THAT(rendered->texts_with_unknown_glyphs, ElementsAre());
  PngReader reader{rendered->data};
  cairo_surface_t* image = cairo_image_surface_create_from_png_stream(ReadPng, &reader);
  ASSERT_EQ(cairo_surface_status(image), CAIRO_STATUS_SUCCESS);
  const HeatmapLayout& layout = rendered->layout;
  EXPECT_EQ(cairo_image_surface_get_width(image), layout.width);
  EXPECT_EQ(cairo_image_surface_get_height(image), layout.height);
  for (int p = 0; p < 2; ++p) {
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 6; ++c) {
        const render::Box cell = layout.Cell(p, r, c);
        const float value = heatmap.panels[p].values[r * 6 + c];
        const Rgb expected = render::YlOrBr(value / layout.vmax);
        // Every pixel of the cell, not only its centre: cells meet without seams.
        for (int y = cell.y; y < cell.y + cell.height; y += 3) {
          for (int x = cell.x; x < cell.x + cell.width; x += 3) {
            ASSERT_EQ(Describe(Pixel(image, x, y)), Describe(expected))
                << "panel " << p << " cell " << r << ", " << c << " at " << x << ", " << y;
          }
        }
      }
    }
  }
  // The colour bar runs from the darkest colour at the top to the lightest at the bottom.
  const render::Box& bar = layout.colorbar;
  const Rgb top = Pixel(image, bar.x + bar.width / 2, bar.y);
  const Rgb bottom = Pixel(image, bar.x + bar.width / 2, bar.y + bar.height - 1);
  EXPECT_LE(top.r + top.g + top.b, 0x66 + 0x25 + 0x06 + 12) << Describe(top);
  EXPECT_GE(bottom.r + bottom.g + bottom.b, 0xff + 0xff + 0xe5 - 12) << Describe(bottom);
  cairo_surface_destroy(image);
}

// Masked cells are grey whatever their value; the others keep their value's colour.
TEST(HeatmapRenderTest, MaskedCellsAreGrey) {
  Heatmap heatmap = Example();
  heatmap.panels[1].masked.assign(24, false);
  heatmap.panels[1].masked[5] = true;   // row 0, column 5
  heatmap.panels[1].masked[13] = true;  // row 2, column 1
  absl::StatusOr<render::RenderedHeatmap> rendered =
      render::RenderHeatmap(heatmap, render::ImageFormat::kPng);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  PngReader reader{rendered->data};
  cairo_surface_t* image = cairo_image_surface_create_from_png_stream(ReadPng, &reader);
  ASSERT_EQ(cairo_surface_status(image), CAIRO_STATUS_SUCCESS);
  const HeatmapLayout& layout = rendered->layout;
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < 24; ++i) {
      const render::Box cell = layout.Cell(p, i / 6, i % 6);
      const bool masked = p == 1 && (i == 5 || i == 13);
      const Rgb expected =
          masked ? render::kMaskedColor : render::YlOrBr(heatmap.panels[p].values[i] / layout.vmax);
      EXPECT_EQ(Describe(Pixel(image, cell.x + cell.width / 2, cell.y + cell.height / 2)),
                Describe(expected))
          << "panel " << p << " cell " << i;
    }
  }
  cairo_surface_destroy(image);
  heatmap.panels[1].masked.pop_back();
  EXPECT_THAT(render::LayoutHeatmap(heatmap).status().message(),
              HasSubstr("expected no mask or 24 mask flags, got 23"));
}

std::string XmlEscaped(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else {
      out += c;
    }
  }
  return out;
}

TEST(HeatmapRenderTest, SvgHasTheSizeAndTheLabelsAsText) {
  Heatmap heatmap = Example();
  heatmap.column_labels[5] = "<&>";
  absl::StatusOr<render::RenderedHeatmap> rendered =
      render::RenderHeatmap(heatmap, render::ImageFormat::kSvg);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  const std::string& svg = rendered->data;
  EXPECT_THAT(svg, HasSubstr(absl::StrCat("width=\"", rendered->layout.width, "px\" height=\"",
                                          rendered->layout.height, "px\"")));
  EXPECT_THAT(svg, HasSubstr("<title>example: layer 1</title>"));
  for (int p = 0; p < 2; ++p) {
    for (size_t i = 0; i < heatmap.row_labels.size(); ++i) {
      const std::regex pattern(absl::StrCat("<text class=\"row-label\" data-panel=\"", p,
                                            "\" data-index=\"", i, "\"[^>]*>([^<]*)</text>"));
      std::smatch match;
      ASSERT_TRUE(std::regex_search(svg, match, pattern)) << p << " " << i;
      EXPECT_EQ(match[1].str(), XmlEscaped(heatmap.row_labels[i]));
    }
    for (size_t i = 0; i < heatmap.column_labels.size(); ++i) {
      const std::regex pattern(absl::StrCat("<text class=\"column-label\" data-panel=\"", p,
                                            "\" data-index=\"", i, "\"[^>]*>([^<]*)</text>"));
      std::smatch match;
      ASSERT_TRUE(std::regex_search(svg, match, pattern)) << p << " " << i;
      EXPECT_EQ(match[1].str(), XmlEscaped(heatmap.column_labels[i]));
    }
  }
  EXPECT_THAT(svg, HasSubstr(">&lt;&amp;&gt;</text>"));
  // The drawing itself: cairo writes glyphs as symbols used by reference.
  EXPECT_THAT(svg, HasSubstr("<use xlink:href=\"#glyph"));
}

TEST(HeatmapRenderTest, ReportsCharactersNoFontHas) {
  EXPECT_EQ(render::UnknownGlyphCount(kVietnamese), 0);
  EXPECT_EQ(render::UnknownGlyphCount("나는 오늘 랭체인을 공부한다"), 0);
  // U+0378 is unassigned: no font has it, and pango draws a hex box.
  const std::string unassigned = "a\u0378b";
  EXPECT_EQ(render::UnknownGlyphCount(unassigned), 1);
  Heatmap heatmap = Example();
  heatmap.row_labels[2] = unassigned;
  absl::StatusOr<render::RenderedHeatmap> rendered =
      render::RenderHeatmap(heatmap, render::ImageFormat::kPng);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_THAT(rendered->texts_with_unknown_glyphs, ElementsAre(unassigned));
}

TEST(HeatmapRenderTest, WriteHeatmapNamesThePathItCannotWrite) {
  const absl::Status status =
      render::WriteHeatmap(Example(), "/nonexistent-dir/heatmap.png").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("'/nonexistent-dir/heatmap.png'"));
}

// An answer as the client library hands it out: `layers` x `heads` slices over `labels`.
AttentionResult Answer(const std::vector<int32_t>& layers, const std::vector<int32_t>& heads,
                       int head_slices) {
  AttentionResult result;
  result.model = "m";
  for (const auto& [token, original] : std::vector<std::pair<std::string, std::string>>{
           {"[CLS]", ""}, {"toi", "Tôi"}, {"viet", "Việt"}, {"ᄅ", "랭"}, {"[SEP]", ""}}) {
    result.tokens.add_tokens(token);
    result.tokens.add_original_texts(original);
  }
  result.layers = layers;
  result.heads = heads;
  result.attentions.shape = {static_cast<int64_t>(layers.size()), head_slices, 5, 5};
  result.attentions.dim_names = {"layer", "head", "query_token", "key_token"};
  for (int64_t i = 0; i < result.attentions.num_elements(); ++i) {
    result.attentions.values.push_back(static_cast<float>((i * 7) % 11) / 11);
  }
  return result;
}

TEST(AttentionDisplayTest, LabelsAndTitles) {
  const AttentionResult one = Answer({3}, {1}, 1);
  EXPECT_EQ(TokenLabel(one.tokens, 0), "[CLS]");
  EXPECT_EQ(TokenLabel(one.tokens, 2), "Việt");
  v1::Tokens pieces;
  for (const auto& [token, original] : std::vector<std::pair<std::string, std::string>>{
           {"<s>", ""}, {"\u2581", " "}, {"<0xC3>", ""}, {"\u2581T", " T"}}) {
    pieces.add_tokens(token);
    pieces.add_original_texts(original);
  }
  EXPECT_EQ(TokenLabel(pieces, 0), "<s>");
  EXPECT_EQ(TokenLabel(pieces, 1), "\u2581") << "a blank original text would be invisible";
  EXPECT_EQ(TokenLabel(pieces, 2), "<0xC3>");
  EXPECT_EQ(TokenLabel(pieces, 3), " T");
  pieces.clear_original_texts();
  EXPECT_EQ(TokenLabel(pieces, 3), "\u2581T") << "an older server sends no original_texts";
  EXPECT_EQ(DescribeIndices({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(DescribeIndices({0, 2, 5, 6, 7}), "0, 2, 5-7");
  EXPECT_EQ(DescribeIndices({3, 1}), "3, 1");

  absl::StatusOr<render::Heatmap> heatmap = AttentionHeatmap(one, v1::HEAD_AGGREGATION_NONE);
  ASSERT_TRUE(heatmap.ok()) << heatmap.status();
  EXPECT_EQ(heatmap->title, "m: layer 3, head 1");
  EXPECT_EQ(heatmap->row_labels, std::vector<std::string>({"[CLS]", "Tôi", "Việt", "랭", "[SEP]"}));
  EXPECT_EQ(heatmap->column_labels, heatmap->row_labels);
  ASSERT_EQ(heatmap->panels.size(), 1u);
  EXPECT_EQ(heatmap->panels[0].values, one.attentions.values);

  heatmap = AttentionHeatmap(Answer({2}, {0, 1, 2, 3}, 1), v1::HEAD_AGGREGATION_MEAN);
  ASSERT_TRUE(heatmap.ok()) << heatmap.status();
  EXPECT_EQ(heatmap->title, "m: layer 2, mean of heads 0-3");

  const AttentionResult grid = Answer({2}, {0, 1, 2, 3}, 4);
  heatmap = AttentionHeatmap(grid, v1::HEAD_AGGREGATION_NONE);
  ASSERT_TRUE(heatmap.ok()) << heatmap.status();
  EXPECT_EQ(heatmap->title, "m: layer 2");
  ASSERT_EQ(heatmap->panels.size(), 4u);
  EXPECT_EQ(heatmap->panels[3].title, "head 3");
  EXPECT_EQ(heatmap->panels[3].values,
            std::vector<float>(grid.attentions.values.begin() + 75, grid.attentions.values.end()));

  heatmap = AttentionHeatmap(Answer({0, 1, 2}, {0, 1, 2, 3}, 1), v1::HEAD_AGGREGATION_MAX);
  ASSERT_TRUE(heatmap.ok()) << heatmap.status();
  EXPECT_EQ(heatmap->title, "m: max of heads 0-3");
  EXPECT_EQ(heatmap->panels[2].title, "layer 2");

  heatmap = AttentionHeatmap(Answer({0, 1}, {0, 1, 2}, 3), v1::HEAD_AGGREGATION_NONE);
  ASSERT_TRUE(heatmap.ok()) << heatmap.status();
  EXPECT_EQ(heatmap->title, "m");
  EXPECT_EQ(heatmap->panel_columns, 3);
  EXPECT_EQ(heatmap->panels[4].title, "layer 1, head 1");

  // A window: rows and columns start at the window's first positions.
  AttentionResult window = Answer({0}, {0}, 1);
  window.query_start = 1;
  window.key_start = 2;
  window.attentions.shape = {1, 1, 2, 3};
  window.attentions.values.resize(6);
  heatmap = AttentionHeatmap(window, v1::HEAD_AGGREGATION_NONE);
  ASSERT_TRUE(heatmap.ok()) << heatmap.status();
  EXPECT_EQ(heatmap->row_labels, std::vector<std::string>({"Tôi", "Việt"}));
  EXPECT_EQ(heatmap->column_labels, std::vector<std::string>({"Việt", "랭", "[SEP]"}));

  // A causal model's masks: keys after the query, and in layer 1 (window 2) keys two or more
  // back; layer 0 has no window. Rows are queries 1 and 2, columns keys 0 to 4.
  v1::ModelInfo causal;
  causal.set_is_causal(true);
  causal.add_layer_sliding_windows(0);
  causal.add_layer_sliding_windows(2);
  AttentionResult layers = Answer({0, 1}, {0}, 1);
  layers.query_start = 1;
  layers.key_start = 0;
  layers.attentions.shape = {2, 1, 2, 5};
  layers.attentions.values.assign(20, 0.1f);
  heatmap = AttentionHeatmap(layers, v1::HEAD_AGGREGATION_NONE, &causal);
  ASSERT_TRUE(heatmap.ok()) << heatmap.status();
  ASSERT_EQ(heatmap->panels.size(), 2u);
  EXPECT_EQ(heatmap->panels[0].masked,
            std::vector<bool>({false, false, true, true, true, false, false, false, true, true}));
  EXPECT_EQ(heatmap->panels[1].masked,
            std::vector<bool>({false, false, true, true, true, true, false, false, true, true}));
  // Without the model's description, or for a bidirectional one, nothing is masked.
  heatmap = AttentionHeatmap(layers, v1::HEAD_AGGREGATION_NONE);
  ASSERT_TRUE(heatmap.ok()) << heatmap.status();
  EXPECT_TRUE(heatmap->panels[1].masked.empty());

  AttentionResult wrong = Answer({0}, {0}, 2);
  EXPECT_THAT(AttentionHeatmap(wrong, v1::HEAD_AGGREGATION_NONE).status().message(),
              HasSubstr("expected shape [1, 1, 5, 5], got [1, 2, 5, 5]"));
}

TEST(AttentionDisplayTest, TopAttendedLinesSortAndAlign) {
  const std::vector<std::string> rows = {"[CLS]", "랭", "Việt"};
  const std::vector<std::string> columns = {"a", "b", "c", "d"};
  const std::vector<float> weights = {0.1f, 0.4f, 0.4f,  0.1f,  //
                                      0.7f, 0.1f, 0.1f,  0.1f,  //
                                      0.0f, 0.0f, 0.25f, 0.75f};
  // Equal weights keep key order; Hangul takes two columns of the label width; keys of weight
  // exactly 0 (the row could not see them) are left out.
  EXPECT_EQ(TopAttendedLines(rows, columns, weights, 3),
            "[CLS] -> b 0.40, c 0.40, a 0.10\n"
            "랭    -> a 0.70, b 0.10, c 0.10\n"
            "Việt  -> d 0.75, c 0.25\n");
  EXPECT_EQ(TopAttendedLines({"x"}, {"a", "b"}, {0.5f, 0.5f}, 9), "x -> a 0.50, b 0.50\n");
  EXPECT_EQ(TopAttendedLines({"x"}, {"a", "b"}, {0.2f, 0.8f}, 0), "x -> b 0.80\n");
}

TEST(AttentionDisplayTest, AttentionTextHasABlockPerSlice) {
  AttentionResult result = Answer({3}, {0, 1}, 2);
  absl::StatusOr<std::string> text = AttentionText(result, v1::HEAD_AGGREGATION_NONE, 1);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("layer 3, head 0:\n[CLS] -> "));
  EXPECT_THAT(*text, HasSubstr("\n\nlayer 3, head 1:\n"));
  // A top_k answer shows the server's entries.
  result = Answer({3}, {0}, 1);
  result.attentions.shape = {1, 1, 5, 2};
  result.attentions.values = {0.5f, 0.2f, 0.6f, 0.1f, 0.9f, 0.05f, 0.4f, 0.3f, 0.8f, 0.1f};
  DecodedTensor indices;
  indices.shape = {1, 1, 5, 2};
  indices.wire_dtype = v1::DTYPE_INT32;
  indices.int_values = {0, 4, 1, 2, 2, 3, 3, 0, 4, 1};
  result.top_k_indices = indices;
  text = AttentionText(result, v1::HEAD_AGGREGATION_NONE, 3);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("Tôi   -> Tôi 0.60, Việt 0.10\n"));
  EXPECT_THAT(*text, HasSubstr("[SEP] -> [SEP] 0.80, Tôi 0.10\n"));
}

}  // namespace
}  // namespace attnscope
