#!/usr/bin/env bash
# Fetches the default model's general-domain text through apt and writes OUT/general.jsonl
# (scripts/extract_general_text.py): Debian's translated package descriptions (the
# Translation-{en,vi,ko} files of bookworm's main/i18n) and the translation catalogues of a fixed
# list of packages, downloaded and unpacked, not installed. apt runs with a private state folder
# (OUT/apt), so the machine's apt configuration, lists and packages stay as they are.
#
#   scripts/fetch_general_text.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:?usage: scripts/fetch_general_text.sh OUT}
mkdir -p "$out/apt/lists/partial" "$out/apt/cache/archives/partial" "$out/apt/debs"
# Absolute: apt-get download runs inside the debs folder and reads the configuration from there.
apt_dir=$(realpath "$out/apt")
# The machine's apt.conf.d may say Acquire::Languages "none"; this list replaces it.
cat > "$apt_dir/languages.conf" <<'CONF'
#clear Acquire::Languages;
Acquire::Languages { "en"; "vi"; "ko"; };
CONF
apt_options=(-c "$apt_dir/languages.conf" -o "Dir::State::Lists=$(realpath "$apt_dir/lists")"
  -o "Dir::Cache=$(realpath "$apt_dir/cache")" -o Debug::NoLocking=1)
apt-get "${apt_options[@]}" update -q
for lang in en vi ko; do
  /usr/lib/apt/apt-helper cat-file \
    "$apt_dir"/lists/*_debian_dists_bookworm_main_i18n_Translation-"$lang".* \
    > "$apt_dir/Translation-$lang"
done
# The packages whose catalogues translate the most text into Vietnamese and Korean (command help,
# messages, country and keyboard names).
catalogue_packages=(apt bash binutils-common coreutils diffutils dpkg findutils gettext git
  iso-codes libc-l10n libglib2.0-data libgtk-3-common login make procps tar wget xkb-data)
(cd "$apt_dir/debs" && apt-get "${apt_options[@]}" download "${catalogue_packages[@]}")
rm -rf "$apt_dir/unpacked"
for deb in "$apt_dir"/debs/*.deb; do dpkg-deb -x "$deb" "$apt_dir/unpacked"; done
sha256sum "$apt_dir"/Translation-* "$apt_dir"/debs/*.deb
nice -n 19 python3 scripts/extract_general_text.py --translations "$apt_dir" \
  --packages "$apt_dir/unpacked" --heldout tests/data/general-domain-heldout.jsonl --out "$out"
