// `attnscope heatmap`: attention drawn into a PNG or SVG file.
#include "client/render/heatmap.h"

#include <cmath>
#include <iostream>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/attention_display.h"
#include "client/cli/attention_request.h"
#include "client/cli/commands.h"
#include "common/status_macros.h"

namespace attnscope::cli {
namespace {

struct Flags {
  AttentionFlags attention;
  std::optional<std::string> out;
  std::optional<double> vmax;
};

absl::StatusOr<double> ParseVmax(const std::string& text) {
  double value;
  if (!absl::SimpleAtod(text, &value) || !(value > 0) || !std::isfinite(value)) {
    return UsageError(
        absl::StrCat("--vmax: expected a positive number such as 1, got '", text, "'"));
  }
  return value;
}

absl::StatusOr<Output> RunHeatmap(const Flags& flags, const CommandContext& context) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string path, Required("heatmap", "--out", flags.out));
  absl::StatusOr<render::ImageFormat> format = render::ImageFormatFromPath(path);
  if (!format.ok()) return UsageError(absl::StrCat("--out: ", format.status().message()));
  ATTNSCOPE_ASSIGN_OR_RETURN(v1::GetAttentionRequest request,
                             AttentionRequest("heatmap", flags.attention));
  // Streamed, so that a large selection meets no response size cap; the picture's own size limit
  // (kMaxImageSide) comes first.
  ATTNSCOPE_ASSIGN_OR_RETURN(AttentionResult result,
                             context.client.StreamAttention(request, context.call));
  // The model's masks, to draw the cells they hid grey rather than as attention of 0.
  ATTNSCOPE_ASSIGN_OR_RETURN(const v1::ModelInfo info,
                             context.client.GetModelInfo(result.model, context.call));
  ATTNSCOPE_ASSIGN_OR_RETURN(render::Heatmap heatmap,
                             AttentionHeatmap(result, request.head_aggregation(), &info));
  heatmap.vmax = flags.vmax;
  ATTNSCOPE_ASSIGN_OR_RETURN(render::RenderedHeatmap rendered, render::WriteHeatmap(heatmap, path));
  if (!rendered.texts_with_unknown_glyphs.empty()) {
    std::cerr << "attnscope: warning: no installed font has some characters of '"
              << absl::StrJoin(rendered.texts_with_unknown_glyphs, "', '")
              << "'; they are drawn as boxes in " << path
              << " (install fonts-noto-cjk: scripts/install-deps.sh)\n";
  }
  const render::HeatmapLayout& layout = rendered.layout;
  return JsonOutput({{"path", path},
                     {"format", *format == render::ImageFormat::kPng ? "png" : "svg"},
                     {"width", layout.width},
                     {"height", layout.height},
                     {"panels", heatmap.panels.size()},
                     {"vmax", layout.vmax},
                     {"layers", result.layers},
                     {"heads", result.heads}});
}

}  // namespace

Command AddHeatmapCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "heatmap",
      "attention drawn as a PNG or SVG heatmap, YlOrBr colours with a colour bar. One layer and "
      "one head: one panel. One layer, several heads: a grid of heads. Several layers with "
      "--aggregate mean: one panel per layer (head means). Rows are query tokens, columns key "
      "tokens, labelled with their original text ([CLS] etc. for special tokens); keys a causal "
      "model's masks hid (after the query, outside a layer's sliding window) are grey. Prints "
      "the file's path and size as JSON");
  auto flags = std::make_shared<Flags>();
  AddAttentionQueryFlags(*command, &flags->attention);
  command->option_defaults()->group("Heatmap");
  AddStringFlag(*command, "--out", "FILE.png|FILE.svg",
                "the file to write; the extension picks the format", &flags->out);
  AddParsedFlag(*command, "--vmax", "V",
                "the value drawn darkest (default the largest value shown, so the scale is "
                "0..max; --vmax=1 for 0..1)",
                &flags->vmax, ParseVmax);
  return {command, [flags](const CommandContext& context) { return RunHeatmap(*flags, context); }};
}

}  // namespace attnscope::cli
