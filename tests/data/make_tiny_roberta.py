#!/usr/bin/python3
"""Builds tests/data/tiny-roberta: a small random XLM-RoBERTa cross-encoder (the layout of
XLMRobertaForSequenceClassification rerankers such as bge-reranker-v2-m3), plus goldens.

The reference forward pass follows transformers' modeling_roberta.py (which modeling_xlm_roberta.py
copies) with PyTorch's own modules (nn.Embedding, nn.LayerNorm, nn.MultiheadAttention with
average_attn_weights=False, nn.GELU, nn.Linear), not a transcription of the C++ engine, and runs in
float64 on the float32 weights that are saved. What sets it apart from BERT:
  - positions: a token that is not the pad id (config pad_token_id, 1) takes the next position
    after pad_token_id, counting only such tokens; a pad-id token takes pad_token_id
    (create_position_ids_from_input_ids), so max_position_embeddings 66 holds 64 tokens;
  - one token type (type_vocab_size 1, every type id 0);
  - no pooler: the head is out_proj(tanh(dense(h_<s>))) (RobertaClassificationHead in eval mode).
Weights are exported under transformers' names (roberta.encoder.layer.N.attention.self.query.weight,
classifier.dense.weight, classifier.out_proj.weight, ...) in a safetensors file written by hand from
the format's specification, so nothing here depends on the C++ reader either.

The tokenizer is tests/data/tiny-xlmr-tokenizer's tokenizer.json (a 5,002-piece Unigram model in
XLM-R's layout), linked, not copied; the goldens' ids come from SentencePiece's own encoder on that
model's sentencepiece.bpe.model (fairseq ids: SentencePiece's id + 1, its <unk> 0 -> 3), with
<s> A </s> (</s> B </s>) around them as XLM-R's template, on texts where SentencePiece and
Hugging Face's tokenizers agree (NFC, single spaces; see tests/tokenizer_reference/check_xlmr_spm.py).

Outputs (all under tests/data/tiny-roberta/):
  config.json, model.safetensors, tokenizer_config.json, tokenizer.json (a symlink): the checkpoint.
  golden.json: for each case the input_ids / attention_mask fed to the model and the expected
  position_ids, last_hidden_state, hidden_states, attentions (per layer [batch, head, query, key])
  and logits, rounded to 1e-9.

Run with Debian's interpreter (python3-torch, python3-sentencepiece):
  /usr/bin/python3 tests/data/make_tiny_roberta.py
"""
import json
import os
import struct
import unicodedata

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tiny-roberta")
TOKENIZER = "tiny-xlmr-tokenizer"

VOCAB = 5002  # the tokenizer's pieces: <s> <pad> </s> <unk>, 4,997 SentencePiece pieces, <mask>
HIDDEN = 16
HEADS = 4
LAYERS = 2
INTERMEDIATE = 32
PAD = 1
BOS = 0
EOS = 2
MAX_TOKENS = 64
MAX_POSITIONS = MAX_TOKENS + PAD + 1
EPS = 1e-5


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True)
        self.attention_norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.intermediate = nn.Linear(HIDDEN, INTERMEDIATE)
        self.activation = nn.GELU()  # exact erf form
        self.output = nn.Linear(INTERMEDIATE, HIDDEN)
        self.output_norm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, x, key_padding_mask):
        attended, weights = self.attention(x, x, x, key_padding_mask=key_padding_mask,
                                           need_weights=True, average_attn_weights=False)
        x = self.attention_norm(attended + x)
        return self.output_norm(self.output(self.activation(self.intermediate(x))) + x), weights


def position_ids(input_ids):
    """create_position_ids_from_input_ids, token by token: a running count of the tokens that are
    not PAD, offset by PAD; a PAD token takes PAD and is not counted."""
    rows = []
    for row in input_ids.tolist():
        count, positions = 0, []
        for token in row:
            if token == PAD:
                positions.append(PAD)
            else:
                count += 1
                positions.append(PAD + count)
        rows.append(positions)
    return torch.tensor(rows)


class CrossEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB, HIDDEN)
        self.position = nn.Embedding(MAX_POSITIONS, HIDDEN)
        self.token_type = nn.Embedding(1, HIDDEN)
        self.embedding_norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.dense = nn.Linear(HIDDEN, HIDDEN)
        self.out_proj = nn.Linear(HIDDEN, 1)

    def forward(self, input_ids, attention_mask):
        positions = position_ids(input_ids)
        x = self.embedding_norm(self.word(input_ids) + self.token_type(torch.zeros_like(input_ids)) +
                                self.position(positions))
        hidden_states, attentions = [x], []
        for layer in self.layers:
            x, weights = layer(x, key_padding_mask=attention_mask == 0)
            hidden_states.append(x)
            attentions.append(weights)
        logits = self.out_proj(torch.tanh(self.dense(x[:, 0])))
        return positions, x, hidden_states, attentions, logits


def hf_state_dict(model):
    """The weights under transformers' XLMRobertaForSequenceClassification names."""
    tensors = {
        "roberta.embeddings.word_embeddings.weight": model.word.weight,
        "roberta.embeddings.position_embeddings.weight": model.position.weight,
        "roberta.embeddings.token_type_embeddings.weight": model.token_type.weight,
        "roberta.embeddings.LayerNorm.weight": model.embedding_norm.weight,
        "roberta.embeddings.LayerNorm.bias": model.embedding_norm.bias,
        "classifier.dense.weight": model.dense.weight,
        "classifier.dense.bias": model.dense.bias,
        "classifier.out_proj.weight": model.out_proj.weight,
        "classifier.out_proj.bias": model.out_proj.bias,
    }
    for i, layer in enumerate(model.layers):
        p = f"roberta.encoder.layer.{i}."
        # nn.MultiheadAttention packs query, key and value rows into in_proj_weight.
        q, k, v = layer.attention.in_proj_weight.chunk(3)
        qb, kb, vb = layer.attention.in_proj_bias.chunk(3)
        tensors.update({
            p + "attention.self.query.weight": q, p + "attention.self.query.bias": qb,
            p + "attention.self.key.weight": k, p + "attention.self.key.bias": kb,
            p + "attention.self.value.weight": v, p + "attention.self.value.bias": vb,
            p + "attention.output.dense.weight": layer.attention.out_proj.weight,
            p + "attention.output.dense.bias": layer.attention.out_proj.bias,
            p + "attention.output.LayerNorm.weight": layer.attention_norm.weight,
            p + "attention.output.LayerNorm.bias": layer.attention_norm.bias,
            p + "intermediate.dense.weight": layer.intermediate.weight,
            p + "intermediate.dense.bias": layer.intermediate.bias,
            p + "output.dense.weight": layer.output.weight,
            p + "output.dense.bias": layer.output.bias,
            p + "output.LayerNorm.weight": layer.output_norm.weight,
            p + "output.LayerNorm.bias": layer.output_norm.bias,
        })
    return {name: t.detach().to(torch.float32).contiguous() for name, t in tensors.items()}


def write_safetensors(path, tensors):
    """safetensors: u64 little-endian header size, JSON header, then the raw little-endian data."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = tensors[name].numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # align the data area to 8 bytes, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


class Encoder:
    """XLM-R's ids from SentencePiece: fairseq's dictionary puts <s> <pad> </s> <unk> first, so a
    piece's id is SentencePiece's + 1, and SentencePiece's own <unk> (0) becomes 3."""

    def __init__(self):
        import sentencepiece  # only this encoder needs it (make_reranker_golden.py does not)
        self.sp = sentencepiece.SentencePieceProcessor(
            model_file=os.path.join(HERE, TOKENIZER, "sentencepiece.bpe.model"))

    def ids(self, text):
        return [i + 1 if i else 3 for i in self.sp.encode(unicodedata.normalize("NFC", text))]

    def encode(self, text, text_pair=None):
        """<s> A </s>, or <s> A </s> </s> B </s> for a pair."""
        ids = [BOS] + self.ids(text) + [EOS]
        if text_pair is not None:
            ids += [EOS] + self.ids(text_pair) + [EOS]
        return ids


def batch(encodings):
    length = max(len(ids) for ids in encodings)
    return {
        "input_ids": [ids + [PAD] * (length - len(ids)) for ids in encodings],
        "attention_mask": [[1] * len(ids) + [0] * (length - len(ids)) for ids in encodings],
    }


def rounded(values):
    """Nested lists of floats at 1e-9: far below the tests' 1e-5, and a third of the file."""
    if isinstance(values, list):
        return [rounded(v) for v in values]
    return round(values, 9)


def main():
    torch.manual_seed(20261203)
    model = CrossEncoder()
    with torch.no_grad():
        # Larger-than-default weights give peaked, head-specific attention, a sharper test than the
        # near-uniform attention of a freshly initialised model.
        for name, param in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif "norm" in name:
                param.copy_(0.1 * torch.randn_like(param))
            else:
                param.copy_(0.5 * torch.randn_like(param))
    model.eval()
    os.makedirs(OUT, exist_ok=True)
    write_safetensors(os.path.join(OUT, "model.safetensors"), hf_state_dict(model))
    config = {
        "architectures": ["XLMRobertaForSequenceClassification"], "model_type": "xlm-roberta",
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "intermediate_size": INTERMEDIATE, "hidden_act": "gelu",
        "max_position_embeddings": MAX_POSITIONS, "type_vocab_size": 1, "layer_norm_eps": EPS,
        "pad_token_id": PAD, "bos_token_id": BOS, "eos_token_id": EOS,
        "position_embedding_type": "absolute", "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0}, "torch_dtype": "float32",
    }
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(HERE, TOKENIZER, "tokenizer_config.json")) as f:
        tokenizer_config = json.load(f)
    tokenizer_config["model_max_length"] = MAX_TOKENS
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config, f, indent=2)
        f.write("\n")
    link = os.path.join(OUT, "tokenizer.json")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.join("..", TOKENIZER, "tokenizer.json"), link)

    encoder = Encoder()
    texts = {
        "single": ("Returns the result of an F test.", None),
        "pair": ("how do I insert a table", "Insert a table in the text document."),
    }
    cases = {name: [encoder.encode(*pair)] for name, pair in texts.items()}
    cases["padded_batch"] = [encoder.encode("Chèn bảng"),
                             encoder.encode("Repeat", "Returns the number of date intervals."),
                             encoder.encode("Position of the table")]
    # A pad id among real tokens (a typed "<pad>" is matched as the added token): it takes position
    # PAD and the tokens after it count on without it.
    typed_pad = encoder.encode("Insert a table")
    cases["typed_pad"] = [typed_pad[:2] + [PAD] + typed_pad[2:]]
    golden = {}
    reference = model.double()
    for name, encodings in cases.items():
        inputs = batch(encodings)
        with torch.no_grad():
            positions, last, hidden_states, attentions, logits = reference(
                torch.tensor(inputs["input_ids"]), torch.tensor(inputs["attention_mask"]))
        golden[name] = dict(inputs,
                            position_ids=positions.tolist(),
                            last_hidden_state=rounded(last.tolist()),
                            hidden_states=[rounded(h.tolist()) for h in hidden_states],
                            attentions=[rounded(a.tolist()) for a in attentions],
                            logits=rounded(logits.tolist()))
        if name in texts:
            golden[name]["text"], golden[name]["text_pair"] = texts[name]
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f)


if __name__ == "__main__":
    main()
