#!/usr/bin/env bash
# The test command: installs what is missing, builds everything, runs every test that checks a
# behaviour (unit, integration and fuzz) with CTest, then builds the unit tests once more with
# AddressSanitizer and UndefinedBehaviorSanitizer (build-sanitize) and runs them there. Needs root
# or sudo for apt on a fresh machine.
#
#   scripts/test.sh          the tests CI runs
#   scripts/test.sh --slow   the tests labelled "slow" instead: figures measured on the built-in
#                            models (held-out chrF of the translation model, where the default
#                            model's attributions point), minutes each
#
# Each stage ends with a line "attnscope-stage NAME SECONDS" (the builds: scripts/build.sh), which
# .ci/run adds up.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
slow=false
[ "${1:-}" = "--slow" ] && slow=true
# The real weights, vocabularies and goldens are read in place from ../shared (or
# ATTNSCOPE_SHARED_DIR); without them a third of the tests would fail one by one.
export ATTNSCOPE_SHARED_DIR=${ATTNSCOPE_SHARED_DIR:-$root/../shared}
if [ ! -d "$ATTNSCOPE_SHARED_DIR/models/stories260K" ]; then
  echo "scripts/test.sh: shared fixtures '$ATTNSCOPE_SHARED_DIR': expected the shared folder" \
    "(models/stories260K, vocab/, testdata/), got nothing there; clone next to it or set" \
    "ATTNSCOPE_SHARED_DIR" >&2
  exit 1
fi

# stage NAME COMMAND...: runs the command and prints how long it took.
stage() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "attnscope-stage $name $((SECONDS - start))"
}

bash "$root/scripts/build.sh"
cd "$root/build"
if $slow; then
  stage slow-tests ctest --output-on-failure --timeout 1800 -L slow
  exit 0
fi

# Two tests at a time (two cores); the integration binaries that time something or load both cores
# run alone (RUN_SERIAL, tests/integration/CMakeLists.txt).
stage tests ctest --output-on-failure --timeout 900 -j2 -LE slow

bash "$root/scripts/build.sh" --sanitize --target tests/unit/all
cd "$root/build-sanitize/tests/unit"
# Left out: the tests that load a SentencePiece model (Llama's, Marian's or T5's). Its module must be
# dlopen()ed with RTLD_DEEPBIND beside LibTorch (models/tokenizers/sentencepiece_module.h), which
# AddressSanitizer refuses (google/sanitizers#611); the SentencePiece tokenizer runs under the
# sanitizers in the fuzz targets instead, linked without LibTorch.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/sanitizer/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# Each unit binary is one CTest test (tests/CMakeLists.txt), so the cases are left out by gtest's
# own filter.
GTEST_FILTER='-SentencePieceTokenizerTest.*:MarianTokenizerTest.*:T5TokenizerTest.*'
GTEST_FILTER+=':ConfigTest.MarianIsServed:ConfigTest.T5IsServed:Tokenizers/LongTextTest.*/sentencepiece*'
GTEST_FILTER+=':RequestEncodeTest.ClsPoolingNeedsASpecialTokenFirst'
GTEST_FILTER+=':Bfloat16Test.Stories260KPredictsAsInFloat32'
# Also left out: the built-in model's quality figures over its held-out sets (ranking, masked-token
# prediction, attention entropy), thousands of forwards and a minute and a half under the
# sanitizers, through the BERT code that bert_test and engine_test run here.
GTEST_FILTER+=':DefaultModelTest.*'
export GTEST_FILTER
stage sanitizer-tests ctest --output-on-failure --timeout 900 -j2 -L unit
