#!/usr/bin/python3
"""Writes tests/data/tiny-roberta/reranker_golden.json: the relevance scores that tiny-roberta (an
XLMRobertaForSequenceClassification cross-encoder, bge-reranker-v2-m3's layout, made by
make_tiny_roberta.py) gives the query/document pairs of the reranker tutorials, in Korean and
Vietnamese, as the PyTorch reference of make_tiny_roberta.py computes them in float64.

The ids are Hugging Face's tokenizers library's (the Node binding, from the tokenizer reference's
node_modules) on tiny-roberta's tokenizer.json, for the pair (query, document) with special tokens:
<s> query </s></s> document </s>, as a reranker reads it. The weights are read back from
tiny-roberta/model.safetensors, so this golden follows the committed checkpoint.

Output: {"pairs": [{"query", "document", "input_ids", "score"}]}, score being the classifier's one
logit (CrossAttention's relevance_score).

  /usr/bin/python3 tests/data/make_reranker_golden.py \\
      --node-modules build/tokenizer-reference/node_modules
"""
import argparse
import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
from make_attribution_golden import read_safetensors  # noqa: E402  (float64 tensors by name)
from make_tiny_roberta import CrossEncoder  # noqa: E402

MODEL = os.path.join(HERE, "tiny-roberta")

# "랭체인 뭐야" ("what is LangChain") against the LangChain and weather documents of the Korean
# reranker tutorials and the dashboard's Korean preset; "Tôi yêu Việt Nam quá" ("I love Vietnam so
# much") with the dashboard's Vietnamese documents, as query and as document.
PAIRS = [
    ("랭체인 뭐야", "랭체인은 대규모 언어 모델로 애플리케이션을 만드는 프레임워크입니다"),
    ("랭체인 뭐야", "오늘 서울의 날씨는 맑고 따뜻합니다"),
    ("랭체인 뭐야", "오늘 저녁에는 김치찌개를 먹었다"),
    ("Tôi yêu Việt Nam quá", "Để chèn một bảng mới vào tài liệu, hãy chọn Bảng - Chèn bảng."),
    ("Tôi yêu Việt Nam quá", "Đặt lề trái, phải, trên và dưới của trang."),
    ("chèn bảng", "Tôi yêu Việt Nam quá"),
]

ENCODE = r"""
const { Tokenizer } = require(process.argv[1] + '/tokenizers')
const pairs = JSON.parse(require('fs').readFileSync(0, 'utf8'))
const tok = Tokenizer.fromFile(process.argv[2])
Promise.all(pairs.map(([q, d]) => tok.encode(q, d, { addSpecialTokens: true })))
  .then((encodings) => console.log(JSON.stringify(encodings.map((e) => e.getIds()))))
"""


def hf_encoder(tensors):
    """make_tiny_roberta's CrossEncoder holding the checkpoint's weights (its hf_state_dict
    reversed: query, key and value rows packed back into nn.MultiheadAttention's in_proj)."""
    model = CrossEncoder().double()
    own = {
        "word.weight": "roberta.embeddings.word_embeddings.weight",
        "position.weight": "roberta.embeddings.position_embeddings.weight",
        "token_type.weight": "roberta.embeddings.token_type_embeddings.weight",
        "embedding_norm.weight": "roberta.embeddings.LayerNorm.weight",
        "embedding_norm.bias": "roberta.embeddings.LayerNorm.bias",
        "dense.weight": "classifier.dense.weight", "dense.bias": "classifier.dense.bias",
        "out_proj.weight": "classifier.out_proj.weight", "out_proj.bias": "classifier.out_proj.bias",
    }
    state = {name: tensors[key] for name, key in own.items()}
    for i in range(len(model.layers)):
        p, m = f"roberta.encoder.layer.{i}.", f"layers.{i}."
        state[m + "attention.in_proj_weight"] = torch.cat(
            [tensors[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")])
        state[m + "attention.in_proj_bias"] = torch.cat(
            [tensors[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
        for name, key in {"attention.out_proj": "attention.output.dense",
                          "attention_norm": "attention.output.LayerNorm",
                          "intermediate": "intermediate.dense", "output": "output.dense",
                          "output_norm": "output.LayerNorm"}.items():
            state[m + name + ".weight"] = tensors[p + key + ".weight"]
            state[m + name + ".bias"] = tensors[p + key + ".bias"]
    model.load_state_dict(state)
    model.eval()
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--node-modules", required=True,
                        help="a node_modules holding tokenizers (tests/tokenizer_reference's)")
    args = parser.parse_args()
    encoded = subprocess.run(
        ["node", "-e", ENCODE, os.path.abspath(args.node_modules),
         os.path.join(MODEL, "tokenizer.json")],
        input=json.dumps(PAIRS), capture_output=True, text=True, check=True).stdout
    ids = json.loads(encoded)
    model = hf_encoder(read_safetensors(os.path.join(MODEL, "model.safetensors")))
    pairs = []
    with torch.no_grad():
        for (query, document), input_ids in zip(PAIRS, ids):
            inputs = torch.tensor([input_ids])
            *_, logits = model(inputs, torch.ones_like(inputs))
            pairs.append({"query": query, "document": document, "input_ids": input_ids,
                          "score": round(float(logits[0, 0]), 9)})
    with open(os.path.join(MODEL, "reranker_golden.json"), "w", encoding="utf-8") as f:
        json.dump({"pairs": pairs}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for pair in pairs:
        print(f"{pair['score']:+.6f}  {pair['query']} | {pair['document']}")


if __name__ == "__main__":
    main()
