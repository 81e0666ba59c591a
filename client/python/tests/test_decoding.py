"""The client's parts that need no server: tensor decoding, stream reassembly, the channel's
service config, option checks and error conversion."""
import json
import unittest

import grpc
import numpy as np

import attnscope
from attnscope import errors, pb


def tensor(values, shape, dtype, dims=()):
    wire = {pb.DTYPE_FLOAT32: "<f4", pb.DTYPE_FLOAT16: "<f2", pb.DTYPE_INT32: "<i4"}[dtype]
    return pb.Tensor(shape=shape, dim_names=dims, dtype=dtype,
                     data=np.asarray(values, dtype=wire).tobytes())


class DecodeTensorTest(unittest.TestCase):
    def test_float32_keeps_shape_dims_and_values(self):
        values = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
        decoded = attnscope.decode_tensor(
            tensor(values, [2, 3, 4], pb.DTYPE_FLOAT32, ["layer", "query_token", "key_token"]))
        self.assertIsInstance(decoded, attnscope.Tensor)
        self.assertEqual(decoded.dims, ("layer", "query_token", "key_token"))
        self.assertEqual(decoded.wire_dtype, "float32")
        self.assertEqual(decoded.dtype, np.float32)
        np.testing.assert_array_equal(decoded, values)

    def test_float16_widens_every_value_exactly(self):
        halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
        decoded = attnscope.decode_tensor(pb.Tensor(shape=[1 << 16], dtype=pb.DTYPE_FLOAT16,
                                                    data=halves.astype("<f2").tobytes()))
        self.assertEqual(decoded.dtype, np.float32)
        self.assertEqual(decoded.wire_dtype, "float16")
        expected = halves.astype(np.float32)
        finite = np.isfinite(expected)
        np.testing.assert_array_equal(decoded[finite], expected[finite])
        np.testing.assert_array_equal(np.isnan(decoded), np.isnan(expected))
        np.testing.assert_array_equal(np.isinf(decoded), np.isinf(expected))

    def test_bfloat16_is_the_upper_half_of_a_float32(self):
        # 1.0, -2.0, +inf, the smallest subnormal, and 0.1 rounded to bfloat16 (0x3DCD).
        bits = np.array([0x3F80, 0xC000, 0x7F80, 0x0001, 0x3DCD], dtype="<u2")
        decoded = attnscope.decode_tensor(pb.Tensor(shape=[5], dtype=pb.DTYPE_BFLOAT16,
                                                    data=bits.tobytes()))
        self.assertEqual(decoded.dtype, np.float32)
        self.assertEqual(decoded.wire_dtype, "bfloat16")
        expected = (bits.astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(decoded, expected)
        self.assertEqual(decoded[0], 1.0)
        self.assertEqual(decoded[1], -2.0)
        self.assertTrue(np.isposinf(decoded[2]))
        self.assertAlmostEqual(float(decoded[4]), 0.1, delta=0.001)

    def test_int32_stays_int32(self):
        decoded = attnscope.decode_tensor(tensor([-1, 0, 7, 2**31 - 1], [2, 2], pb.DTYPE_INT32))
        self.assertEqual(decoded.dtype, np.int32)
        np.testing.assert_array_equal(decoded, [[-1, 0], [7, 2**31 - 1]])

    def test_scalar_and_empty(self):
        self.assertEqual(attnscope.decode_tensor(tensor([3.5], [], pb.DTYPE_FLOAT32)), 3.5)
        self.assertEqual(attnscope.decode_tensor(tensor([], [2, 0], pb.DTYPE_FLOAT32)).shape,
                         (2, 0))

    def test_derived_arrays_carry_no_names(self):
        decoded = attnscope.decode_tensor(tensor(np.ones(4), [2, 2], pb.DTYPE_FLOAT32,
                                                 ["query_token", "key_token"]))
        self.assertIsNone(decoded.T.dims)
        self.assertIsNone(decoded.sum(axis=-1).dims)

    def test_malformed_tensors_are_internal_errors(self):
        cases = {
            "data bytes": tensor([1, 2, 3], [2, 2], pb.DTYPE_FLOAT32),
            "dimension names": tensor([1, 2], [2], pb.DTYPE_FLOAT32, ["a", "b"]),
            "dtype unknown(0)": pb.Tensor(shape=[1], data=b"\0\0\0\0"),
            "shape [-1]": pb.Tensor(shape=[-1], dtype=pb.DTYPE_FLOAT32),
            "shape [4611686018427387904, 4]": pb.Tensor(shape=[2**62, 4],
                                                        dtype=pb.DTYPE_FLOAT32),
        }
        # Each named by what the message says.
        for named, message in cases.items():
            with self.subTest(named), self.assertRaises(attnscope.InternalError) as raised:
                attnscope.decode_tensor(message)
            self.assertIn(named, str(raised.exception))


class StreamAssemblerTest(unittest.TestCase):
    """Pieces made by hand: a header for 2 layers x 2 heads x 3 queries x 2 keys."""

    def setUp(self):
        self.full = np.arange(24, dtype=np.float32).reshape(2, 2, 3, 2)
        self.assembler = attnscope.StreamAssembler()
        self.assembler.add(pb.StreamAttentionResponse(header=pb.StreamAttentionHeader(
            model="m", layers=[0, 3], heads=[0, 1], attentions_shape=[2, 2, 3, 2],
            dim_names=["layer", "head", "query_token", "key_token"], dtype=pb.DTYPE_FLOAT32)))

    def piece(self, layer_index, head, row, heads, rows, layer=None):
        values = self.full[layer_index, head:head + heads, row:row + rows]
        return pb.StreamAttentionResponse(layer=pb.StreamAttentionLayer(
            layer=[0, 3][layer_index] if layer is None else layer, head_offset=head,
            query_offset=row, attentions=tensor(values, values.shape, pb.DTYPE_FLOAT32)))

    def test_whole_layers_and_rows_of_one_head(self):
        self.assembler.add(self.piece(0, 0, 0, 2, 3))
        for head in range(2):
            self.assembler.add(self.piece(1, head, 0, 1, 2))
            self.assembler.add(self.piece(1, head, 2, 1, 1))
        result = self.assembler.finish()
        np.testing.assert_array_equal(result.attentions, self.full)
        self.assertEqual(result.attentions.dims, ("layer", "head", "query_token", "key_token"))
        self.assertEqual(result.layers, [0, 3])

    def test_contract_breaches(self):
        cases = [
            ("sent a layer of block 1", [pb.StreamAttentionResponse(
                layer=pb.StreamAttentionLayer(layer=0, block=pb.ATTENTION_BLOCK_DECODER_SELF))]),
            ("continuing at element 0", [self.piece(0, 0, 1, 1, 2)]),
            ("where the header announced 0", [self.piece(0, 0, 0, 2, 3, layer=3)]),
            ("sent two headers", [pb.StreamAttentionResponse(header=pb.StreamAttentionHeader())]),
            ("sent an empty message", [pb.StreamAttentionResponse()]),
        ]
        for expected, messages in cases:
            with self.subTest(expected), self.assertRaises(attnscope.InternalError) as raised:
                self.setUp()
                for message in messages:
                    self.assembler.add(message)
            self.assertIn(expected, str(raised.exception))
            self.assertIn("StreamAttention: the server's stream", str(raised.exception))

    def test_a_stream_cut_short(self):
        self.assembler.add(self.piece(0, 0, 0, 2, 3))
        with self.assertRaisesRegex(attnscope.InternalError, "ended after 1 of 2 layers"):
            self.assembler.finish()
        with self.assertRaisesRegex(attnscope.InternalError, "ended without a header"):
            attnscope.StreamAssembler().finish()


class ClientOptionsTest(unittest.TestCase):
    def test_service_config_is_the_cpp_clients(self):
        # client_test.cc's expectation for the default ClientOptions.
        self.assertEqual(json.loads(attnscope.service_config_json()), json.loads(
            '{"loadBalancingConfig":[{"round_robin":{}}],"methodConfig":[{"name":['
            '{"service":"attnscope.v1.AttentionService"},{"service":"grpc.health.v1.Health"}],'
            '"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"2s",'
            '"backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}'))
        self.assertNotIn("retryPolicy", attnscope.service_config_json(max_attempts=1))

    def test_defaults(self):
        client = attnscope.Client("127.0.0.1:1")
        self.assertEqual(client.timeout, 60.0)
        self.assertEqual(client.max_response_bytes, 64 << 20)
        self.assertEqual(client.receive_limit_bytes, (64 << 20) + (1 << 20))
        client.close()

    def test_bad_options(self):
        for options in [{"address": ""}, {"max_attempts": 0}, {"max_response_bytes": 0},
                        {"max_response_bytes": 2**31}, {"timeout": 0}, {"initial_backoff": -1}]:
            with self.subTest(options), self.assertRaises(attnscope.InvalidArgumentError):
                attnscope.Client(**{"address": "127.0.0.1:1", **options})

    def test_bad_request_fields(self):
        client = attnscope.Client("127.0.0.1:1")
        with self.assertRaisesRegex(TypeError, "GetAttentionRequest has no field 'layer'"):
            client.get_attention("x", layer=[0])
        with self.assertRaisesRegex(attnscope.InvalidArgumentError, "float32, float16"):
            client.get_attention("x", dtype="float64")
        client.close()

    def test_tls_files(self):
        with self.assertRaisesRegex(attnscope.InvalidArgumentError, "both"):
            attnscope.tls_credentials(cert_file="client.pem")
        with self.assertRaisesRegex(attnscope.NotFoundError, "/nonexistent.pem"):
            attnscope.tls_credentials(ca_file="/nonexistent.pem")


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class ErrorTest(unittest.TestCase):
    def test_code_and_message(self):
        error = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.NOT_FOUND, "model 'x'"), 10)
        self.assertIsInstance(error, attnscope.NotFoundError)
        self.assertIsInstance(error, attnscope.Error)
        self.assertEqual((error.code, error.message), ("NOT_FOUND", "model 'x'"))
        self.assertEqual(error.status_code, grpc.StatusCode.NOT_FOUND)
        other = errors.from_rpc_error(FakeRpcError(grpc.StatusCode.DATA_LOSS, "lost"), 10)
        self.assertEqual((type(other), other.code), (attnscope.Error, "DATA_LOSS"))

    def test_oversized_messages_say_which_side_refused(self):
        answer = errors.from_rpc_error(FakeRpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED, "Received message larger than max (20 vs. 10)"), 10)
        self.assertIsInstance(answer, attnscope.ResourceExhaustedError)
        self.assertIn("raise it to the server's --max_response_bytes", answer.message)
        request = errors.from_rpc_error(FakeRpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED, "Received message larger than max (20 vs. 15)"), 10)
        self.assertIn("the request is 20 bytes, over the 15 bytes", request.message)


if __name__ == "__main__":
    unittest.main()
