#!/usr/bin/env python3
"""Builds the English->Vietnamese and English->Korean parallel text of the translation model, and
its tokenizer files, from the LibreOffice help pages.

  extract  --out DIR --heldout FILE
      DIR/train.jsonl          {"lang": "vi"|"ko", "source", "target"}, one pair a line
      DIR/source_corpus.txt    the English side, one text a line (input of the source.spm)
      DIR/target_corpus.txt    the Vietnamese and Korean sides (input of the target.spm)
      FILE                     the held-out pairs, same format: titles and headings of held-out
                               pages first, then their short paragraphs
  tokenizer --out DIR --model_dir MODEL_DIR --source_vocab_size N --target_vocab_size M
      MODEL_DIR/source.spm, target.spm   SentencePiece unigram models trained on DIR's corpora
      MODEL_DIR/vocab.json               the piece -> id map MarianTokenizer reads (shared by both)
      MODEL_DIR/tokenizer_config.json    as transformers' MarianTokenizer writes it

The help of every language has the same page paths (text/swriter/guide/x.html) and the translated
pages keep the English block structure, so blocks of one page path correspond by position: a page
contributes pairs only when the sequence of its block kinds (title, heading, paragraph) is the same
in both languages. The Vietnamese and Korean help is only partly translated: a pair is kept only
when the source is English and the target is in the target language (extract_help_text's
detect_language), which drops the untranslated English those packages hold.

Pages are held out by extract_help_text's is_heldout (a hash of the page path), the rule of the
default model, so that neither model trains on a held-out page in any language. Held-out pairs
whose English also occurs in the training pairs ("Syntax", "Example") are dropped, so that the
evaluation measures translation of unseen text rather than recall. Deterministic: no wall clock,
seeded shuffles only.
"""
import argparse
import collections
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extract_help_text as helptext  # noqa: E402

TARGET_LANGS = ("vi", "ko")
SEED = 20261202
HELDOUT_PAIRS_PER_LANG = 250
# Held-out paragraphs fill up to HELDOUT_PAIRS_PER_LANG after the titles and headings; longer ones
# need far more decoding time and say little more about the model.
HELDOUT_MAX_PARAGRAPH_WORDS = 15
# Longer paragraphs are tables of settings and lists run together; they would dominate the
# padded batches for little gain.
MAX_SOURCE_WORDS = 60
# Characters of target per character of source: Korean runs about 0.5, Vietnamese about 1.1. A
# ratio far outside means the blocks do not correspond (a translator split or merged them).
MIN_LENGTH_RATIO = 0.15
MAX_LENGTH_RATIO = 4.0

# Marian's multilingual convention: the source starts with the token of the target language.
LANGUAGE_TOKENS = {"vi": ">>vie<<", "ko": ">>kor<<"}


def page_paths(lang):
    root = os.path.join(helptext.HELP_ROOT, helptext.LANG_DIRS[lang])
    paths = {}
    for folder, _, names in os.walk(os.path.join(root, "text")):
        for name in names:
            if name.endswith(".html"):
                path = os.path.join(folder, name)
                paths[os.path.relpath(path, root)] = path
    if not paths:
        package = helptext.LANG_DIRS[lang].lower()
        sys.exit(f"no help pages under {root}: install libreoffice-help-{package}")
    return paths


def page_pairs(source_items, target_items, lang):
    """(kind, source, target) of two versions of one page, or [] when their block kinds differ."""
    if [kind for kind, _ in source_items] != [kind for kind, _ in target_items]:
        return []
    pairs = []
    for (kind, source), (_, target) in zip(source_items, target_items):
        if source == target or len(source.split()) > MAX_SOURCE_WORDS:
            continue
        if helptext.detect_language(source) != "en":
            continue
        if helptext.detect_language(target) != lang:
            continue
        if not MIN_LENGTH_RATIO <= len(target) / len(source) <= MAX_LENGTH_RATIO:
            continue
        pairs.append((kind, source, target))
    return pairs


def extract(args):
    os.makedirs(args.out, exist_ok=True)
    english = page_paths("en")
    english_items = {rel: helptext.extract_page(path) for rel, path in sorted(english.items())}
    train, heldout = [], []
    for lang in TARGET_LANGS:
        target_paths = page_paths(lang)
        pages = {"train": 0, "heldout": 0, "unmatched": 0}
        train_pairs = {}  # (source, target) -> None: first occurrence order, no duplicates
        heldout_pairs = {}
        for rel in sorted(set(english) & set(target_paths)):
            pairs = page_pairs(english_items[rel], helptext.extract_page(target_paths[rel]), lang)
            split = "heldout" if helptext.is_heldout(rel) else "train"
            if not pairs:
                pages["unmatched"] += 1
                continue
            pages[split] += 1
            for kind, source, target in pairs:
                if split == "train":
                    train_pairs.setdefault((source, target), None)
                else:
                    heldout_pairs.setdefault((source, target), kind)
        seen_sources = {source for source, _ in train_pairs}
        unseen = [(kind, s, t) for (s, t), kind in heldout_pairs.items() if s not in seen_sources]
        rng = random.Random(f"{SEED}-{lang}")
        headings = [(s, t) for kind, s, t in unseen if kind != "paragraph"]
        paragraphs = [(s, t) for kind, s, t in unseen
                      if kind == "paragraph" and len(s.split()) <= HELDOUT_MAX_PARAGRAPH_WORDS]
        rng.shuffle(headings)
        rng.shuffle(paragraphs)
        chosen = (headings + paragraphs)[:HELDOUT_PAIRS_PER_LANG]
        for source, target in chosen:
            heldout.append({"lang": lang, "source": source, "target": target})
        for source, target in train_pairs:
            train.append({"lang": lang, "source": source, "target": target})
        chosen_headings = min(len(headings), HELDOUT_PAIRS_PER_LANG)
        print(f"{lang}: pages train {pages['train']}, held-out {pages['heldout']}, without pairs "
              f"{pages['unmatched']}; train pairs {len(train_pairs)}; held-out pairs "
              f"{len(heldout_pairs)}, {len(heldout_pairs) - len(unseen)} of them dropped as their "
              f"English is in the training pairs, {len(chosen)} kept ({chosen_headings} titles "
              f"and headings)", file=sys.stderr)

    # One seeded order for the whole file, so that a prefix of it holds both languages.
    random.Random(SEED).shuffle(train)
    with open(os.path.join(args.out, "train.jsonl"), "w", encoding="utf-8") as f:
        for pair in train:
            f.write(json.dumps(pair, ensure_ascii=False) + "\n")
    with open(args.heldout, "w", encoding="utf-8") as f:
        for pair in heldout:
            f.write(json.dumps(pair, ensure_ascii=False) + "\n")
    # Each English text once: a heading translated into both languages would otherwise count
    # twice in the source model's piece frequencies.
    sources = list(dict.fromkeys(pair["source"] for pair in train))
    with open(os.path.join(args.out, "source_corpus.txt"), "w", encoding="utf-8") as f:
        f.writelines(text + "\n" for text in sources)
    with open(os.path.join(args.out, "target_corpus.txt"), "w", encoding="utf-8") as f:
        f.writelines(pair["target"] + "\n" for pair in train)
    counts = collections.Counter(pair["lang"] for pair in train)
    held = collections.Counter(pair["lang"] for pair in heldout)
    print("train.jsonl: " + ", ".join(f"{lang} {counts[lang]}" for lang in TARGET_LANGS) +
          f"; {len(sources)} distinct English texts; held-out: " +
          ", ".join(f"{lang} {held[lang]}" for lang in TARGET_LANGS), file=sys.stderr)


def train_sentencepiece(corpus, prefix, vocab_size):
    import sentencepiece  # python3-sentencepiece; only this step needs it
    # Unigram, as Marian's own models. Every character of the corpus is kept (coverage 1): the
    # target model holds Hangul syllables, many rare but each a piece Korean words are made of.
    # The whole corpus in its order on one thread: the model is then a function of the corpus.
    sentencepiece.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, vocab_size=vocab_size, model_type="unigram",
        character_coverage=1.0, unk_id=0, bos_id=-1, eos_id=1, pad_id=-1,
        input_sentence_size=0, shuffle_input_sentence=False, num_threads=1,
        minloglevel=2)
    from sentencepiece import sentencepiece_model_pb2
    model = sentencepiece_model_pb2.ModelProto()
    with open(prefix + ".model", "rb") as f:
        model.ParseFromString(f.read())
    # The trainer records the paths it read and wrote; without them the file depends on the
    # corpus alone, wherever the recipe runs.
    model.trainer_spec.ClearField("input")
    model.trainer_spec.ClearField("model_prefix")
    with open(prefix + ".spm", "wb") as f:
        f.write(model.SerializeToString())
    os.remove(prefix + ".model")
    os.remove(prefix + ".vocab")
    processor = sentencepiece.SentencePieceProcessor(model_file=prefix + ".spm")
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]


def build_tokenizer(args):
    os.makedirs(args.model_dir, exist_ok=True)
    source_pieces = train_sentencepiece(os.path.join(args.out, "source_corpus.txt"),
                                        os.path.join(args.model_dir, "source"),
                                        args.source_vocab_size)
    target_pieces = train_sentencepiece(os.path.join(args.out, "target_corpus.txt"),
                                        os.path.join(args.model_dir, "target"),
                                        args.target_vocab_size)
    # The layout of the Marian conversion (transformers' convert_marian_to_pytorch): "</s>" 0,
    # "<unk>" 1, the pieces of both models once each, "<pad>" last. The language tokens follow
    # "<unk>": MarianTokenizer keeps a leading ">>xxx<<" whole and looks it up here.
    vocab = {"</s>": 0, "<unk>": 1}
    for token in list(LANGUAGE_TOKENS.values()) + source_pieces + target_pieces:
        vocab.setdefault(token, len(vocab))
    vocab["<pad>"] = len(vocab)
    with open(os.path.join(args.model_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
        f.write("\n")
    tokenizer_config = {
        "source_lang": "en",
        "target_lang": "mul",
        "unk_token": "<unk>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "model_max_length": 512,
        "sp_model_kwargs": {},
        "separate_vocabs": False,
        "tokenizer_class": "MarianTokenizer",
    }
    with open(os.path.join(args.model_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config, f, indent=2)
        f.write("\n")
    shared = len(set(source_pieces) & set(target_pieces))
    print(f"source.spm {len(source_pieces)} pieces, target.spm {len(target_pieces)} pieces, "
          f"{shared} in both; vocab.json {len(vocab)} entries", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    extract_parser = commands.add_parser("extract", help="the parallel text and held-out pairs")
    extract_parser.add_argument("--out", required=True,
                                help="folder for train.jsonl and the corpora")
    extract_parser.add_argument("--heldout", required=True, help="the held-out JSONL file")
    tokenizer_parser = commands.add_parser("tokenizer", help="source.spm, target.spm, vocab.json")
    tokenizer_parser.add_argument("--out", required=True, help="the folder `extract` wrote")
    tokenizer_parser.add_argument("--model_dir", required=True, help="the model folder")
    tokenizer_parser.add_argument("--source_vocab_size", type=int, default=8000)
    tokenizer_parser.add_argument("--target_vocab_size", type=int, default=8000)
    args = parser.parse_args()
    if args.command == "extract":
        extract(args)
    else:
        build_tokenizer(args)


if __name__ == "__main__":
    main()
