"""The Python client against a real attnscope-server on loopback: the built-in models (default, a
BERT cross-encoder, and translation, a Marian encoder-decoder) and stories260K (Llama) on one
server for the suite, with StreamAttention's message bound small enough that every layer arrives
in row pieces; and a second server with TLS (certificates made by openssl here) and API keys."""
import json
import os
import subprocess
import tempfile
import unittest

import grpc
import numpy as np

import attnscope
from attnscope import pb
from server import DEFAULT_MODEL, STORIES_MODEL, TRANSLATION_MODEL, Server

TEXT = "Tôi yêu Việt Nam quá, and hello there"
server = None
client = None


def setUpModule():
    global server, client
    # 64 bytes: one query row of up to 16 float32 keys per message.
    server = Server({"default": DEFAULT_MODEL, "stories260K": STORIES_MODEL,
                     "translation": TRANSLATION_MODEL}, ["--max_stream_message_bytes=64"])
    client = attnscope.Client(server.address)


def tearDownModule():
    client.close()
    server.stop()


def assert_same(test, expected, actual, name):
    """Two answers' tensors (or both absent): equal shape, names, wire dtype and values."""
    if expected is None:
        test.assertIsNone(actual, name)
        return
    test.assertEqual((actual.dims, actual.wire_dtype, actual.dtype),
                     (expected.dims, expected.wire_dtype, expected.dtype), name)
    np.testing.assert_array_equal(actual, expected, err_msg=name)


class ModelsTest(unittest.TestCase):
    def test_list_and_describe(self):
        self.assertEqual([m.name for m in client.list_models()],
                         ["default", "stories260K", "translation"])
        info = client.get_model_info("stories260K")
        self.assertEqual((info.architecture, info.num_hidden_layers, info.num_attention_heads,
                          info.is_causal), ("llama", 5, 8, True))
        self.assertEqual(client.get_model_info().name, "default")

    def test_health(self):
        self.assertEqual(client.health(), "SERVING")
        self.assertEqual(client.health("attnscope.v1.AttentionService"), "SERVING")
        with self.assertRaises(attnscope.NotFoundError):
            client.health("no.such.Service")


class AttentionTest(unittest.TestCase):
    def test_shape_names_and_rows(self):
        info = client.get_model_info("default")
        result = client.get_attention(TEXT, model="default")
        seq = len(result.tokens.input_ids)
        self.assertEqual(result.attentions.shape,
                         (info.num_hidden_layers, info.num_attention_heads, seq, seq))
        self.assertEqual(result.attentions.dims, ("layer", "head", "query_token", "key_token"))
        self.assertEqual(result.attentions.dtype, np.float32)
        np.testing.assert_allclose(result.attentions.sum(axis=-1), 1.0, atol=1e-5)
        self.assertTrue(((result.attentions >= 0) & (result.attentions <= 1)).all())
        self.assertEqual(result.layers, list(range(info.num_hidden_layers)))

    def test_causal_model_attends_to_nothing_after_the_query(self):
        result = client.get_attention("Once upon a time there was", model="stories260K",
                                      layers=[-1], heads=[0, 7])
        self.assertEqual((result.layers, result.heads), ([4], [0, 7]))
        above = np.triu(np.ones(result.attentions.shape[-2:], dtype=bool), k=1)
        self.assertTrue((result.attentions[..., above] == 0).all())
        np.testing.assert_allclose(result.attentions.sum(axis=-1), 1.0, atol=1e-5)

    def test_tokenize_gives_the_tokens_attention_reports(self):
        tokens = client.tokenize(TEXT, "a second text", model="default").tokens
        result = client.get_attention(TEXT, "a second text", model="default", layers=[0])
        self.assertEqual(list(tokens.input_ids), list(result.tokens.input_ids))
        self.assertEqual(list(tokens.tokens), list(result.tokens.tokens))
        self.assertEqual(set(tokens.sequence_ids), {-1, 0, 1})
        self.assertEqual([(o.start, o.end) for o in tokens.offsets][1], (0, 3))  # "Tôi"

    def test_a_request_message_is_the_same_request(self):
        from_fields = client.get_attention(TEXT, model="default", layers=[-1], dtype="float16")
        from_message = client.get_attention(pb.GetAttentionRequest(
            model="default", text=TEXT, layers=[-1], dtype=pb.DTYPE_FLOAT16))
        assert_same(self, from_fields.attentions, from_message.attentions, "attentions")

    def test_stream_attention_equals_get_attention(self):
        cases = [
            ("default", {}),
            ("default", {"dtype": "float16", "text_pair": "a second text"}),
            ("default", {"dtype": "bfloat16", "layers": [-1, 0], "heads": [1]}),
            ("default", {"include_scores": True, "rollout": True}),
            ("default", {"top_k": 3, "window": {"query_start": 2, "key_start": 1}}),
            ("default", {"aggregate_words": True, "rollout": True, "head_aggregation": "mean"}),
            ("stories260K", {"head_aggregation": "max"}),
        ]
        for model, options in cases:
            with self.subTest(model=model, **options):
                unary = client.get_attention(TEXT, model=model, **options)
                streamed = client.stream_attention(TEXT, model=model, **options)
                self.assertEqual(streamed.model, unary.model)
                self.assertEqual(list(streamed.tokens.input_ids), list(unary.tokens.input_ids))
                self.assertEqual((streamed.layers, streamed.heads, streamed.query_start,
                                  streamed.key_start),
                                 (unary.layers, unary.heads, unary.query_start, unary.key_start))
                self.assertEqual([w.text for w in streamed.words], [w.text for w in unary.words])
                for name in ("attentions", "scores", "top_k_indices", "rollout"):
                    assert_same(self, getattr(unary, name), getattr(streamed, name), name)

    def test_stream_sends_layers_in_row_pieces(self):
        # What stream_attention reassembled above: more than one piece per layer.
        stub = attnscope.v1.attnscope_pb2_grpc.AttentionServiceStub(client.channel)
        offsets = [m.layer.query_offset
                   for m in stub.StreamAttention(pb.GetAttentionRequest(model="default", text=TEXT),
                                                 timeout=60)
                   if m.WhichOneof("message") == "layer"]
        self.assertGreater(max(offsets), 0)

    def test_encoder_decoder(self):
        options = {"model": "translation", "decoder_text": "Chèn bảng", "layers": [-1]}
        unary = client.get_attention(">>vie<< Inserting Tables", **options)
        streamed = client.stream_attention(">>vie<< Inserting Tables", **options)
        decoder = unary.decoder
        labels = len(decoder.labels.input_ids)
        self.assertEqual(decoder.cross_attentions.shape[2:],
                         (labels, len(unary.tokens.input_ids)))
        self.assertEqual(decoder.cross_attentions.dims[2], "decoder_token")
        np.testing.assert_allclose(decoder.cross_attentions.sum(axis=-1), 1.0, atol=1e-5)
        for name in ("attentions", "cross_attentions", "top_k_indices", "cross_top_k_indices"):
            assert_same(self, getattr(decoder, name), getattr(streamed.decoder, name), name)
        assert_same(self, unary.attentions, streamed.attentions, "encoder attentions")


class OtherRpcsTest(unittest.TestCase):
    def test_encode(self):
        info = client.get_model_info("default")
        response = client.encode([TEXT, ("a query", "a document")], model="default",
                                 output_hidden_states=True, pooling="cls", normalize=True)
        self.assertEqual(len(response.results), 2)
        first = response.results[0]
        seq = len(first.tokens.input_ids)
        self.assertEqual(first.last_hidden_state.shape, (seq, info.hidden_size))
        self.assertEqual(first.last_hidden_state.dims, ("token", "hidden"))
        self.assertEqual(first.hidden_states.shape, (info.num_hidden_layers + 1, seq,
                                                     info.hidden_size))
        np.testing.assert_array_equal(first.hidden_states[-1], first.last_hidden_state)
        self.assertAlmostEqual(float(np.linalg.norm(first.pooled)), 1.0, places=5)

    def test_cross_attention(self):
        result = client.cross_attention("insert a table", ["To insert a table, choose Insert.",
                                                           "Sets the page margins."],
                                        model="default", include_document_to_query=True)
        self.assertEqual(len(result.documents), 2)
        for document in result.documents:
            shape = (4, 4, len(document.query_positions), len(document.document_positions))
            self.assertEqual(document.query_to_document.shape, shape)
            self.assertEqual(document.document_to_query.shape, shape[:2] + shape[:1:-1])
            self.assertIsNotNone(document.relevance_score)
        # The built-in cross-encoder ranks the document that answers first.
        self.assertGreater(result.documents[0].relevance_score,
                           result.documents[1].relevance_score)
        # One text alone is one document, not one document per character.
        single = client.cross_attention("insert a table", "To insert a table, choose Insert.",
                                        model="default")
        self.assertEqual(len(single.documents), 1)
        self.assertAlmostEqual(single.documents[0].relevance_score,
                               result.documents[0].relevance_score, places=4)

    def test_parameters_and_training_record(self):
        names = {p.name: list(p.shape) for p in client.list_parameters("default")}
        name = "bert.embeddings.position_embeddings.weight"
        self.assertEqual(names[name], [128, 128])
        rows = client.get_parameter(name, model="default", row_start=2, row_end=5)
        self.assertEqual((rows.row_start, rows.tensor.shape, rows.tensor.dims),
                         (2, (3, 128), ("row", "column")))
        record = client.get_training_record("default")
        self.assertGreater(len(record.points), 0)
        self.assertIn("loss", record.points[0].values)

    def test_attribute(self):
        response = client.attribute("insert a table", "To insert a table, choose Insert.",
                                    model="default", methods=["occlusion"])
        self.assertEqual(len(response.occlusion), len(response.tokens.input_ids))
        self.assertEqual(len(response.integrated_gradients), 0)


class GenerateTest(unittest.TestCase):
    def test_greedy_tokens_add_up_to_the_result_and_the_golden(self):
        with open(os.path.join(STORIES_MODEL, "expected_greedy.jsonl")) as lines:
            golden = next(c for c in map(json.loads, lines) if c["prompt"] == "Once upon a time")
        stream = client.generate("Once upon a time", model="stories260K", max_new_tokens=12,
                                 output_attentions=True, layers=[-1])
        self.assertEqual(list(stream.header.prompt_tokens.input_ids), golden["input_ids"])
        texts = []
        for token in stream:
            texts.append(token.text)
            self.assertEqual(token.attention.shape, (1, 8, token.token.position))
            np.testing.assert_allclose(token.attention.sum(axis=-1), 1.0, atol=1e-5)
        result = stream.result()
        self.assertEqual("".join(texts), result.text)
        self.assertEqual(list(result.done.ids), golden["greedy_ids"][:12])
        self.assertEqual([t.token.id for t in result.tokens], golden["greedy_ids"][:12])
        self.assertEqual(result.done.finish_reason, pb.FINISH_REASON_LENGTH)
        self.assertTrue(golden["greedy_text"].startswith(result.text))

    def test_result_without_iterating(self):
        result = client.generate("Lily", model="stories260K", max_new_tokens=5,
                                 method="sampling", seed=7, temperature=0.8).result()
        self.assertEqual(len(result.tokens), 5)
        self.assertEqual("".join(t.text for t in result.tokens), result.text)

    def test_cancel_ends_the_stream(self):
        with client.generate("Once upon a time", model="stories260K", max_new_tokens=200,
                             ignore_eos=True) as stream:
            self.assertEqual(next(stream).token.index, 0)
            stream.cancel()
            with self.assertRaises(attnscope.CancelledError):
                stream.result()

    def test_errors_arrive_while_reading(self):
        with self.assertRaises(attnscope.NotFoundError):
            client.generate("x", model="nope").result()
        with self.assertRaises(attnscope.InvalidArgumentError):
            next(iter(client.generate("x", model="default")))


class ErrorsTest(unittest.TestCase):
    def test_unknown_model(self):
        with self.assertRaises(attnscope.NotFoundError) as raised:
            client.get_attention(TEXT, model="no-such-model")
        self.assertEqual(raised.exception.code, "NOT_FOUND")
        self.assertIn("no-such-model", raised.exception.message)
        with self.assertRaises(attnscope.NotFoundError):
            client.stream_attention(TEXT, model="no-such-model")

    def test_bad_input(self):
        with self.assertRaises(attnscope.InvalidArgumentError) as raised:
            client.get_attention("", model="default")
        self.assertIn("text", raised.exception.message)

    def test_answer_over_the_clients_limit(self):
        small = attnscope.Client(server.address, max_response_bytes=1000)
        long_text = "hello world " * 100
        with self.assertRaises(attnscope.ResourceExhaustedError) as raised:
            small.get_attention(long_text, model="default", include_scores=True,
                                tokenization={"truncation": "longest_first"})
        self.assertIn("use stream_attention", raised.exception.message)
        streamed = small.stream_attention(long_text, model="default",
                                          tokenization={"truncation": "longest_first"})
        self.assertEqual(streamed.attentions.shape, (4, 4, 128, 128))
        small.close()

    def test_deadline(self):
        with self.assertRaises(attnscope.DeadlineExceededError):
            client.get_attention(TEXT, model="default", timeout=1e-6)

    def test_unreachable_server(self):
        with attnscope.Client("127.0.0.1:1", max_attempts=2, timeout=10) as unreachable:
            with self.assertRaises(attnscope.UnavailableError):
                unreachable.list_models()


def openssl(*args):
    subprocess.run(["/usr/bin/openssl", *args], check=True, capture_output=True)


class SecurityTest(unittest.TestCase):
    """Mutual TLS with self-signed certificates (each its own CA) and API keys."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        path = cls.path
        for name, extension in (("server", "subjectAltName=IP:127.0.0.1"),
                                ("client", "extendedKeyUsage=clientAuth")):
            openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", path(name + ".key"), "-out", path(name + ".pem"),
                    "-days", "2", "-subj", f"/CN=attnscope python {name}", "-addext", extension)
        with open(path("keys"), "w") as keys:
            keys.write("# the test's key\nsecret-key-1\n")
        cls.server = Server({"default": DEFAULT_MODEL}, [
            f"--tls_cert_file={path('server.pem')}", f"--tls_key_file={path('server.key')}",
            f"--tls_client_ca_file={path('client.pem')}", f"--api_keys_file={path('keys')}"])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.dir.cleanup()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.dir.name, name)

    def client(self, **options):
        credentials = attnscope.tls_credentials(ca_file=self.path("server.pem"),
                                                cert_file=self.path("client.pem"),
                                                key_file=self.path("client.key"))
        return attnscope.Client(self.server.address, tls=credentials, max_attempts=1,
                                **options)

    def test_key_and_certificate_are_let_in(self):
        with self.client(api_key="secret-key-1") as secure:
            self.assertEqual(secure.get_attention(TEXT, layers=[0]).attentions.shape[0], 1)
            self.assertEqual(secure.stream_attention(TEXT, layers=[0]).attentions.shape[0], 1)

    def test_calls_without_a_valid_key_are_refused(self):
        for key in (None, "wrong"):
            with self.subTest(key=key), self.client(api_key=key) as secure:
                with self.assertRaises(attnscope.UnauthenticatedError) as raised:
                    secure.list_models()
                self.assertEqual(raised.exception.status_code, grpc.StatusCode.UNAUTHENTICATED)
        with self.client() as secure:
            self.assertEqual(secure.health(), "SERVING")  # health checks need no key

    def test_plaintext_and_unknown_servers_fail(self):
        with attnscope.Client(self.server.address, api_key="secret-key-1", max_attempts=1,
                              timeout=10) as plain:
            with self.assertRaises(attnscope.UnavailableError):
                plain.list_models()
        # The system's roots do not know the self-signed certificate.
        with attnscope.Client(self.server.address, tls=True, api_key="secret-key-1",
                              max_attempts=1, timeout=10) as system_roots:
            with self.assertRaises(attnscope.UnavailableError):
                system_roots.list_models()


if __name__ == "__main__":
    unittest.main()
