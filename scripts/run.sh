#!/usr/bin/env bash
# The run command: installs what is missing, builds the server, the CLI and the web dashboard,
# starts attnscope-server on its default model, answers GetAttention and CrossAttention requests on
# Vietnamese, Korean and English text through the CLI, prints them, draws one heatmap
# (build/heatmap.png), translates a held-out help title into Vietnamese and Korean with the
# translation model and shows which English tokens each target token read (its cross-attention, as
# text and as build/translation-heatmap.png), prints the dashboard's address, and keeps serving
# until Ctrl-C.
#
#   scripts/run.sh           serve on 127.0.0.1:50051 (metrics on 127.0.0.1:9464, HTTP/JSON API
#                            and the dashboard on http://127.0.0.1:8080/) after the demo requests
#   scripts/run.sh --once    exit after the demo requests
#
# The model: checkpoints/default when present (the built-in model); otherwise the real trained
# stories260K weights from ../shared when this checkout has them; otherwise the small random BERT
# cross-encoder in tests/data/tiny-bert. Beside it, checkpoints/translation (the built-in
# English -> Vietnamese / Korean translation model) when present. Set ATTNSCOPE_MODEL_DIR to serve
# another checkpoint (alone), ATTNSCOPE_LISTEN, ATTNSCOPE_HTTP_LISTEN and ATTNSCOPE_METRICS_LISTEN
# (host:port) for other gRPC, HTTP and metrics addresses, e.g. to run a second server beside the
# first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
once=false
[ "${1:-}" = "--once" ] && once=true

bash "$root/scripts/build.sh" --target attnscope-server attnscope dashboard >&2
demo_start=$SECONDS

model_dir=${ATTNSCOPE_MODEL_DIR:-}
translation_dir=
if [ -z "$model_dir" ]; then
  for candidate in "$root/checkpoints/default" "$root/../shared/models/stories260K" "$root/tests/data/tiny-bert"; do
    if [ -f "$candidate/config.json" ]; then model_dir=$candidate; break; fi
  done
  [ -f "$root/checkpoints/translation/config.json" ] && translation_dir=$root/checkpoints/translation
fi
model_name=$(basename "$model_dir")
address=${ATTNSCOPE_LISTEN:-127.0.0.1:50051}
http_address=${ATTNSCOPE_HTTP_LISTEN:-127.0.0.1:8080}
# The run command keeps /metrics on loopback like its other ports; the server's own default is
# 0.0.0.0 for a Prometheus elsewhere (--metrics_host).
metrics_address=${ATTNSCOPE_METRICS_LISTEN:-127.0.0.1:9464}

models=(--model "$model_name=$model_dir")
served=$model_name
if [ -n "$translation_dir" ]; then
  models+=(--model "translation=$translation_dir")
  served+=" and translation"
fi
"$root/build/server/attnscope-server" "${models[@]}" --listen "$address" \
  --http_listen "$http_address" --metrics_host "${metrics_address%:*}" \
  --metrics_port "${metrics_address##*:}" &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null; wait $server_pid 2>/dev/null' EXIT INT TERM

cli=$root/build/client/attnscope
for _ in $(seq 1 120); do
  if "$cli" health --server "$address" >/dev/null 2>&1; then break; fi
  kill -0 $server_pid 2>/dev/null || { echo "attnscope-server exited during start-up" >&2; exit 1; }
  sleep 0.5
done
"$cli" health --server "$address" >/dev/null

# attnscope COMMAND [flags]: the command comes first.
show() {
  echo
  echo "\$ attnscope $* --model $model_name"
  "$cli" "$1" --server "$address" --model "$model_name" "${@:2}"
}
show info
# One GetAttention and one CrossAttention request on each language, as text: each query token's
# most attended tokens (the CLI prints JSON without --format text). The built-in model knows
# LibreOffice help text: in the English request the first document is the relevant one.
show attention --text "Tôi yêu Việt Nam quá" --layers=-1 --aggregate mean --format text
show cross --query "Việt Nam" --document "Tôi yêu Việt Nam quá" --layers=-1 --aggregate mean \
  --format text
show attention --text "나는 오늘 랭체인을 공부한다" --layers=-1 --aggregate mean --format text
show cross --query "랭체인 공부" --document "나는 오늘 랭체인을 공부한다" --layers=-1 \
  --aggregate mean --format text
table="To insert a new table into the document, choose Table - Insert Table."
show attention --text "insert a table" --text_pair "$table" --layers=-1 --aggregate mean \
  --format text
show cross --query "insert a table" --document "$table" \
  --document "Sets the left, right, top and bottom page margins." --layers=-1 --aggregate mean \
  --format text
# And one picture: every layer's head mean of the Vietnamese sentence.
show heatmap --text "Tôi yêu Việt Nam quá" --aggregate mean --out "$root/build/heatmap.png"

if [ -n "$translation_dir" ]; then
  model_name=translation
  # A help title the translation model never saw (tests/data/translation-heldout.jsonl; the
  # help's own translations: "명령 창에 수식 만들기", "Tạo công thức trong cửa sổ Lệnh"). The target
  # language is the first token. Greedy translation, then the same pair teacher-forced: for each
  # decoder position the English tokens its cross-attention read most (last decoder layer, mean of
  # the heads), each row labelled by the token that position writes (decoder_labels).
  title="Creating a Formula in the Commands Window"
  for code in kor vie; do
    output=$(show generate --prompt ">>$code<< $title" --max_new_tokens 32)
    echo "$output"
    # The translation is the line after the source in the text output.
    translated=$(echo "$output" | sed -n '/^>>/{n;p;q}')
    echo
    echo "\$ attnscope attention --text \">>$code<< $title\" --decoder_text \"$translated\"" \
      "--layers=-1 --aggregate mean --format text --top 2 --model translation  # cross-attention"
    "$cli" attention --server "$address" --model translation --text ">>$code<< $title" \
      --decoder_text "$translated" --layers=-1 --aggregate mean --format text --top 2 |
      sed -n '/^cross-attention/,$p'
  done
  # The last one, Vietnamese, as a picture: target tokens down, English tokens across.
  show heatmap --text ">>vie<< $title" --decoder_text "$translated" --layers=-1 --aggregate mean \
    --out "$root/build/translation-heatmap.png"
fi

dashboard=http://$http_address/
echo
echo "Dashboard: $dashboard"
echo "  the Korean query and documents (랭체인 뭐야): ${dashboard}?view=documents"
echo "  every layer and head of 'Tôi yêu Việt Nam quá': ${dashboard}?view=model"
echo "  the HTTP/JSON API: curl -s -d '{}' ${dashboard}attnscope.v1.AttentionService/ListModels"

echo "attnscope-stage demo $((SECONDS - demo_start))"

if ! $once; then
  echo
  echo "attnscope-server is serving $served on $address (metrics: http://$metrics_address/metrics," \
    "dashboard: $dashboard); Ctrl-C stops it."
  wait $server_pid
fi
