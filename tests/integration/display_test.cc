// `attnscope heatmap` and `--format text` against the real server on the default model, on
// Vietnamese and Korean text. The pictures are read back (cairo for the PNG, the text layer of the
// SVG) and compared with the attention the client library gets for the same request: labels are
// the tokens' original texts, each cell has the colour map's colour for its value, the largest
// value's cell is the darkest, and no label has a glyph missing from the installed fonts. The text
// output's first token per row is the row's argmax.
#include <cairo.h>
#include <pango/pangocairo.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/attention_display.h"
#include "client/render/colormap.h"
#include "client/render/heatmap.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kVietnamese[] = "Tôi yêu Việt Nam quá";
constexpr char kKorean[] = "나는 오늘 랭체인을 공부한다";

// The documented label of a token: its original text, or the token where that is empty or blank.
std::vector<std::string> ExpectedLabels(const v1::Tokens& tokens, int64_t start, int64_t count) {
  std::vector<std::string> labels;
  for (int64_t i = start; i < start + count; ++i) {
    const std::string& original = tokens.original_texts(i);
    const bool blank = original.find_first_not_of(" \t\n\r\f\v") == std::string::npos;
    labels.push_back(blank ? tokens.tokens(i) : original);
  }
  return labels;
}

// Characters of `text` that pango finds in no installed font, set as the heatmap sets its labels.
int UnknownGlyphs(const std::string& text) {
  cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
  cairo_t* cr = cairo_create(surface);
  PangoLayout* layout = pango_cairo_create_layout(cr);
  PangoFontDescription* font = pango_font_description_from_string("Noto Sans CJK KR 12px");
  pango_layout_set_font_description(layout, font);
  pango_layout_set_text(layout, text.data(), static_cast<int>(text.size()));
  const int unknown = pango_layout_get_unknown_glyphs_count(layout);
  pango_font_description_free(font);
  g_object_unref(layout);
  cairo_destroy(cr);
  cairo_surface_destroy(surface);
  return unknown;
}

struct Selection {
  std::string name;
  std::vector<std::string> flags;
  std::vector<int32_t> layers;
  std::vector<int32_t> heads;
  v1::HeadAggregation aggregation;
};

// The three pictures: one head, a layer's heads, every layer's head mean.
const std::vector<Selection>& Selections() {
  static const auto* selections = new std::vector<Selection>{
      {"one head", {"--layers=-1", "--heads=0"}, {-1}, {0}, v1::HEAD_AGGREGATION_NONE},
      {"heads of a layer", {"--layers=-1"}, {-1}, {}, v1::HEAD_AGGREGATION_NONE},
      {"head means of every layer", {"--aggregate=mean"}, {}, {}, v1::HEAD_AGGREGATION_MEAN}};
  return *selections;
}

class DisplayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerProcess::Options options;
    options.models = {"default=" + DefaultModelDir()};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    client_ = server_->NewClient().release();
    absl::StatusOr<v1::ModelInfo> info = client_->GetModelInfo("default");
    ASSERT_TRUE(info.ok()) << info.status();
    info_ = new v1::ModelInfo(*info);
  }
  static void TearDownTestSuite() {
    delete info_;
    delete client_;
    delete server_;
    info_ = nullptr;
    client_ = nullptr;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(info_, nullptr) << "the server did not start"; }

  // Runs the CLI with --server; fails the test on a non-zero exit or anything on stderr.
  static std::string Run(std::vector<std::string> args) {
    args.insert(args.begin(), CliBinary());
    args.push_back("--server=" + server_->address());
    const CommandResult result = RunCommand(args);
    EXPECT_EQ(result.exit_code, 0) << result.stderr_text;
    EXPECT_EQ(result.stderr_text, "") << "no warnings (a missing glyph warns)";
    return result.stdout_text;
  }

  static AttentionResult Attention(const std::string& text, const Selection& selection) {
    v1::GetAttentionRequest request;
    request.set_model("default");
    request.set_text(text);
    request.mutable_layers()->Add(selection.layers.begin(), selection.layers.end());
    request.mutable_heads()->Add(selection.heads.begin(), selection.heads.end());
    request.set_head_aggregation(selection.aggregation);
    absl::StatusOr<AttentionResult> result = client_->GetAttention(request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : AttentionResult();
  }

  // The title: model, layer and head, or the heads' mean.
  static std::string ExpectedTitle(const Selection& selection) {
    const int last_layer = info_->num_hidden_layers() - 1;
    const std::string heads = absl::StrCat("0-", info_->num_attention_heads() - 1);
    if (selection.aggregation == v1::HEAD_AGGREGATION_MEAN) {
      return "default: mean of heads " + heads;
    }
    if (selection.heads.size() == 1) return absl::StrCat("default: layer ", last_layer, ", head 0");
    return absl::StrCat("default: layer ", last_layer);
  }

  // Checks the heatmap AttentionHeatmap makes of `result` against the answer, and lays it out.
  static render::HeatmapLayout CheckedLayout(const AttentionResult& result,
                                             const Selection& selection) {
    absl::StatusOr<render::Heatmap> heatmap = AttentionHeatmap(result, selection.aggregation);
    EXPECT_TRUE(heatmap.ok()) << heatmap.status();
    if (!heatmap.ok()) return {};
    const int64_t tokens = result.tokens.tokens_size();
    EXPECT_EQ(heatmap->row_labels, ExpectedLabels(result.tokens, 0, tokens));
    EXPECT_EQ(heatmap->column_labels, ExpectedLabels(result.tokens, 0, tokens));
    EXPECT_EQ(heatmap->title, ExpectedTitle(selection));
    const size_t slices = result.attentions.shape[0] * result.attentions.shape[1];
    const size_t expected_panels =
        selection.name == "one head" ? 1u : static_cast<size_t>(info_->num_attention_heads());
    EXPECT_EQ(slices, expected_panels);
    EXPECT_EQ(heatmap->panels.size(), slices);
    for (size_t p = 0; p < std::min(slices, heatmap->panels.size()); ++p) {
      const size_t size = tokens * tokens;
      EXPECT_EQ(heatmap->panels[p].values,
                std::vector<float>(result.attentions.values.begin() + p * size,
                                   result.attentions.values.begin() + (p + 1) * size));
    }
    absl::StatusOr<render::HeatmapLayout> layout = render::LayoutHeatmap(*heatmap);
    EXPECT_TRUE(layout.ok()) << layout.status();
    return layout.ok() ? *layout : render::HeatmapLayout();
  }

  static ServerProcess* server_;
  static Client* client_;
  static v1::ModelInfo* info_;
};

ServerProcess* DisplayTest::server_ = nullptr;
Client* DisplayTest::client_ = nullptr;
v1::ModelInfo* DisplayTest::info_ = nullptr;

render::Rgb Pixel(cairo_surface_t* image, int x, int y) {
  const unsigned char* row =
      cairo_image_surface_get_data(image) + y * cairo_image_surface_get_stride(image);
  uint32_t pixel;
  std::memcpy(&pixel, row + 4 * x, 4);
  return {static_cast<uint8_t>(pixel >> 16), static_cast<uint8_t>(pixel >> 8),
          static_cast<uint8_t>(pixel)};
}

int Luminance(render::Rgb color) { return 299 * color.r + 587 * color.g + 114 * color.b; }

TEST_F(DisplayTest, PngCellsFollowTheServersAttention) {
  TempDir dir;
  for (const std::string text : {kVietnamese, kKorean}) {
    for (const Selection& selection : Selections()) {
      SCOPED_TRACE(text + ", " + selection.name);
      const std::string path = dir.path() + "/heatmap.png";
      std::vector<std::string> args = {"heatmap", "--model=default", "--text", text, "--out", path};
      args.insert(args.end(), selection.flags.begin(), selection.flags.end());
      const json printed = json::parse(Run(args), nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(printed.is_discarded());

      const AttentionResult result = Attention(text, selection);
      const render::HeatmapLayout layout = CheckedLayout(result, selection);
      const std::vector<float>& values = result.attentions.values;
      const auto largest = std::max_element(values.begin(), values.end());
      ASSERT_NE(largest, values.end());
      // The scale runs from 0 to the largest value shown.
      EXPECT_FLOAT_EQ(printed["vmax"].get<double>(), *largest);
      EXPECT_FLOAT_EQ(layout.vmax, *largest);
      EXPECT_EQ(printed["width"], layout.width);
      EXPECT_EQ(printed["height"], layout.height);

      cairo_surface_t* image = cairo_image_surface_create_from_png(path.c_str());
      ASSERT_EQ(cairo_surface_status(image), CAIRO_STATUS_SUCCESS);
      EXPECT_EQ(cairo_image_surface_get_width(image), layout.width);
      EXPECT_EQ(cairo_image_surface_get_height(image), layout.height);
      const int tokens = result.tokens.tokens_size();
      int darkest = -1;
      int darkest_luminance = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        const int panel = static_cast<int>(i / (tokens * tokens));
        const int row = static_cast<int>(i / tokens % tokens);
        const int column = static_cast<int>(i % tokens);
        const render::Box cell = layout.Cell(panel, row, column);
        const render::Rgb sampled = Pixel(image, cell.x + cell.width / 2, cell.y + cell.height / 2);
        const render::Rgb expected = render::YlOrBr(values[i] / *largest);
        EXPECT_NEAR(sampled.r, expected.r, 2) << "panel " << panel << ", " << row << ", " << column;
        EXPECT_NEAR(sampled.g, expected.g, 2) << "panel " << panel << ", " << row << ", " << column;
        EXPECT_NEAR(sampled.b, expected.b, 2) << "panel " << panel << ", " << row << ", " << column;
        if (darkest < 0 || Luminance(sampled) < darkest_luminance) {
          darkest = static_cast<int>(i);
          darkest_luminance = Luminance(sampled);
        }
      }
      // Values within one 8-bit colour step of the largest share its colour (a head that puts
      // 0.998 on one key and 0.9979 on another), so the darkest cell holds the largest value or
      // one drawn as dark: its expected colour is the largest's, within the sampling tolerance.
      EXPECT_LE(Luminance(render::YlOrBr(values[darkest] / *largest)),
                Luminance(render::YlOrBr(1.0)) + 2 * 1000)
          << "the darkest cell's value " << values[darkest] << " is drawn as dark as the largest "
          << *largest;
      cairo_surface_destroy(image);
    }
  }
}

std::string XmlUnescape(std::string text) {
  for (const auto& [entity, character] : std::vector<std::pair<std::string, std::string>>{
           {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}}) {
    for (size_t at = text.find(entity); at != std::string::npos; at = text.find(entity, at + 1)) {
      text.replace(at, entity.size(), character);
    }
  }
  return text;
}

// The texts of the SVG's <text class="CLASS" data-panel="PANEL" data-index="i"> elements, by i.
std::vector<std::string> SvgTexts(const std::string& svg, const std::string& css_class, int panel) {
  const std::regex pattern("<text class=\"" + css_class + "\" data-panel=\"" +
                           std::to_string(panel) +
                           "\" data-index=\"([0-9]+)\"[^>]*>([^<]*)</text>");
  std::vector<std::string> texts;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), pattern);
       it != std::sregex_iterator(); ++it) {
    const size_t index = std::stoul((*it)[1].str());
    if (texts.size() <= index) texts.resize(index + 1);
    texts[index] = XmlUnescape((*it)[2].str());
  }
  return texts;
}

TEST_F(DisplayTest, SvgCarriesTheLabelsAsTextAndNoGlyphIsMissing) {
  TempDir dir;
  for (const std::string text : {kVietnamese, kKorean}) {
    for (const Selection& selection : Selections()) {
      SCOPED_TRACE(text + ", " + selection.name);
      const std::string path = dir.path() + "/heatmap.svg";
      std::vector<std::string> args = {"heatmap", "--model=default", "--text", text, "--out", path};
      args.insert(args.end(), selection.flags.begin(), selection.flags.end());
      Run(args);
      const AttentionResult result = Attention(text, selection);
      const render::HeatmapLayout layout = CheckedLayout(result, selection);
      std::ifstream file(path, std::ios::binary);
      const std::string svg((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
      EXPECT_THAT(svg, HasSubstr(absl::StrCat("width=\"", layout.width, "px\" height=\"",
                                              layout.height, "px\"")));
      const std::string title = ExpectedTitle(selection);
      EXPECT_THAT(svg, HasSubstr("<title>" + title + "</title>"));
      const std::vector<std::string> labels =
          ExpectedLabels(result.tokens, 0, result.tokens.tokens_size());
      for (size_t panel = 0; panel < layout.grids.size(); ++panel) {
        EXPECT_EQ(SvgTexts(svg, "row-label", panel), labels) << "panel " << panel;
        EXPECT_EQ(SvgTexts(svg, "column-label", panel), labels) << "panel " << panel;
      }
      // The labels are drawn too, as glyph outlines.
      EXPECT_THAT(svg, HasSubstr("<use xlink:href=\"#glyph"));
      EXPECT_EQ(UnknownGlyphs(title), 0);
      for (const std::string& label : labels) {
        EXPECT_EQ(UnknownGlyphs(label), 0) << label;
      }
    }
  }
}

struct TextRow {
  std::string label;
  // (label, weight as printed) of each shown token.
  std::vector<std::pair<std::string, std::string>> entries;
};

// "LABEL  -> K1 0.41, K2 0.22" lines.
std::vector<TextRow> ParseRows(const std::vector<std::string>& lines) {
  std::vector<TextRow> rows;
  for (const std::string& line : lines) {
    const size_t arrow = line.find(" -> ");
    EXPECT_NE(arrow, std::string::npos) << line;
    if (arrow == std::string::npos) continue;
    TextRow row;
    row.label = std::string(absl::StripTrailingAsciiWhitespace(line.substr(0, arrow)));
    for (absl::string_view entry : absl::StrSplit(line.substr(arrow + 4), ", ")) {
      const size_t space = entry.rfind(' ');
      row.entries.emplace_back(std::string(entry.substr(0, space)),
                               std::string(entry.substr(space + 1)));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// Checks rows of text against a [rows, columns] block of weights: the labels, the first entry is
// the argmax (first of equal maxima) with its weight to two decimals, and weights descend.
void CheckRows(const std::vector<TextRow>& rows, const std::vector<std::string>& row_labels,
               const std::vector<std::string>& column_labels, const float* weights, int top) {
  ASSERT_EQ(rows.size(), row_labels.size());
  const size_t columns = column_labels.size();
  for (size_t r = 0; r < rows.size(); ++r) {
    SCOPED_TRACE(absl::StrCat("row ", r, " '", row_labels[r], "'"));
    EXPECT_EQ(rows[r].label, row_labels[r]);
    const float* row = weights + r * columns;
    const size_t argmax = std::max_element(row, row + columns) - row;
    ASSERT_EQ(rows[r].entries.size(), std::min<size_t>(top, columns));
    EXPECT_EQ(rows[r].entries[0].first, column_labels[argmax]);
    EXPECT_EQ(rows[r].entries[0].second, absl::StrFormat("%.2f", row[argmax]));
    for (size_t i = 1; i < rows[r].entries.size(); ++i) {
      EXPECT_GE(std::stod(rows[r].entries[i - 1].second), std::stod(rows[r].entries[i].second));
    }
  }
}

// Splits text output into blocks (separated by empty lines) of lines.
std::vector<std::vector<std::string>> Blocks(const std::string& text) {
  std::vector<std::vector<std::string>> blocks;
  for (absl::string_view block : absl::StrSplit(text, "\n\n", absl::SkipEmpty())) {
    blocks.emplace_back(absl::StrSplit(block, '\n', absl::SkipEmpty()));
  }
  return blocks;
}

TEST_F(DisplayTest, AttentionTextShowsEachRowsArgmax) {
  const std::vector<Selection> selections = {
      {"two heads", {"--layers=-1", "--heads=0,2"}, {-1}, {0, 2}, v1::HEAD_AGGREGATION_NONE},
      {"head means",
       {"--layers=0,-1", "--aggregate=mean"},
       {0, -1},
       {},
       v1::HEAD_AGGREGATION_MEAN}};
  for (const std::string text : {kVietnamese, kKorean}) {
    for (const Selection& selection : selections) {
      SCOPED_TRACE(text + ", " + selection.name);
      std::vector<std::string> args = {"attention", "--model=default", "--text", text,
                                       "--format=text"};
      args.insert(args.end(), selection.flags.begin(), selection.flags.end());
      const std::vector<std::vector<std::string>> blocks = Blocks(Run(args));
      const AttentionResult result = Attention(text, selection);
      const int64_t tokens = result.tokens.tokens_size();
      const std::vector<std::string> labels = ExpectedLabels(result.tokens, 0, tokens);
      const int64_t heads = result.attentions.shape[1];
      ASSERT_EQ(blocks.size(), result.layers.size() * heads);
      for (size_t b = 0; b < blocks.size(); ++b) {
        const std::string head =
            selection.aggregation == v1::HEAD_AGGREGATION_MEAN
                ? absl::StrCat("mean of heads 0-", info_->num_attention_heads() - 1)
                : absl::StrCat("head ", result.heads[b % heads]);
        ASSERT_FALSE(blocks[b].empty());
        EXPECT_EQ(blocks[b][0], absl::StrCat("layer ", result.layers[b / heads], ", ", head, ":"));
        CheckRows(ParseRows({blocks[b].begin() + 1, blocks[b].end()}), labels, labels,
                  result.attentions.values.data() + b * tokens * tokens, 3);
      }
    }
  }
  // --top sets how many tokens a row shows.
  const std::vector<std::vector<std::string>> blocks =
      Blocks(Run({"attention", "--model=default", "--text", kVietnamese, "--layers=-1", "--heads=1",
                  "--format", "text", "--top", "5"}));
  ASSERT_EQ(blocks.size(), 1u);
  for (const TextRow& row : ParseRows({blocks[0].begin() + 1, blocks[0].end()})) {
    EXPECT_EQ(row.entries.size(), 5u);
  }
}

TEST_F(DisplayTest, CrossTextShowsEachQueryTokensArgmax) {
  const std::string output = Run({"cross", "--model=default", "--query", "Việt Nam", "--document",
                                  kVietnamese, "--document", kKorean, "--layers=-1",
                                  "--aggregate=mean", "--doc_to_query", "--format=text"});
  v1::CrossAttentionRequest request;
  request.set_model("default");
  request.set_query("Việt Nam");
  request.add_documents(kVietnamese);
  request.add_documents(kKorean);
  request.add_layers(-1);
  request.set_head_aggregation(v1::HEAD_AGGREGATION_MEAN);
  request.set_include_document_to_query(true);
  absl::StatusOr<CrossAttentionResult> result = client_->CrossAttention(request);
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<std::vector<std::string>> blocks = Blocks(output);
  // Per document: the query -> document block (after the document's line), then the other way.
  ASSERT_EQ(blocks.size(), 2 * result->documents.size());
  for (size_t d = 0; d < result->documents.size(); ++d) {
    SCOPED_TRACE(absl::StrCat("document ", d));
    const DocumentAttentionResult& document = result->documents[d];
    std::vector<std::string> query;
    std::vector<std::string> text;
    for (int32_t position : document.query_positions) {
      query.push_back(ExpectedLabels(document.tokens, position, 1)[0]);
    }
    for (int32_t position : document.document_positions) {
      text.push_back(ExpectedLabels(document.tokens, position, 1)[0]);
    }
    const std::vector<std::string>& forward = blocks[2 * d];
    const std::vector<std::string>& backward = blocks[2 * d + 1];
    ASSERT_GE(forward.size(), 2u);
    ASSERT_TRUE(document.relevance_score.has_value());
    EXPECT_EQ(forward[0],
              absl::StrFormat("document %d: relevance %.4g", d, *document.relevance_score));
    EXPECT_THAT(forward[1], HasSubstr("query -> document:"));
    CheckRows(ParseRows({forward.begin() + 2, forward.end()}), query, text,
              document.query_to_document.values.data(), 3);
    EXPECT_THAT(backward[0], HasSubstr("document -> query:"));
    CheckRows(ParseRows({backward.begin() + 1, backward.end()}), text, query,
              document.document_to_query->values.data(), 3);
  }
}

TEST_F(DisplayTest, MistakesExitTwo) {
  const std::string server = "--server=" + server_->address();
  struct Mistake {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Mistake> mistakes = {
      {{"heatmap", "--text=hello", "--out=/tmp/x.jpg"},
       "--out: heatmap file '/tmp/x.jpg': expected a name ending in .png or .svg, got '.jpg'"},
      {{"heatmap", "--text=hello"}, "'heatmap' needs --out"},
      {{"heatmap", "--text=hello", "--out=x.png", "--vmax=0"}, "--vmax: expected a positive"},
      {{"heatmap", "--text=hello", "--out=x.png", "--top_k=2"}, "--top_k does not apply"},
      {{"attention", "--text=hello", "--format=yaml"}, "--format: 'yaml' is not one of json, text"},
      {{"attention", "--text=hello", "--top=2"}, "--top applies to --format text"},
      {{"attention", "--text=hello", "--format=text", "--top=0"}, "--top: expected at least 1"},
      {{"attention", "--text=hello", "--format=text", "--npy_dir=/tmp"}, "--npy_dir"},
      {{"cross", "--query=a", "--document=b", "--format=text", "--npy_dir=/tmp"}, "--npy_dir"},
  };
  for (const Mistake& mistake : mistakes) {
    std::vector<std::string> args = {CliBinary()};
    args.insert(args.end(), mistake.args.begin(), mistake.args.end());
    args.push_back(server);
    const CommandResult result = RunCommand(args);
    EXPECT_EQ(result.exit_code, 2) << mistake.message;
    EXPECT_THAT(result.stderr_text, HasSubstr(mistake.message));
  }
  // A file that cannot be written is not a usage mistake: the call failed.
  const CommandResult result =
      RunCommand({CliBinary(), "heatmap", "--text=hello", "--out=/nonexistent-dir/x.png", server});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.stderr_text, HasSubstr("'/nonexistent-dir/x.png'"));
}

}  // namespace
}  // namespace attnscope::testing
