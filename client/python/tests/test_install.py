"""`pip install --no-build-isolation client/python` works offline with Debian's packages: in a
venv that sees the system's site-packages, the installed package carries the generated stubs and
talks to a real server."""
import os
import shutil
import subprocess
import tempfile
import unittest

from server import DEFAULT_MODEL, SOURCE_DIR, Server

SMOKE = """
import sys, attnscope
assert attnscope.__file__.startswith(sys.prefix), attnscope.__file__
with attnscope.Client(sys.argv[1]) as client:
    result = client.get_attention("hello world", layers=[0])
    print(*result.attentions.shape, len(result.tokens.input_ids))
"""


class InstallTest(unittest.TestCase):
    def test_pip_install_from_the_checkout(self):
        with tempfile.TemporaryDirectory() as scratch:
            # A copy of what the build reads (the package and ../../proto), so that the build's
            # leftovers (build/, attnscope.egg-info) stay out of the checkout.
            checkout = os.path.join(scratch, "checkout")
            shutil.copytree(os.path.join(SOURCE_DIR, "client", "python"),
                            os.path.join(checkout, "client", "python"),
                            ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
            shutil.copytree(os.path.join(SOURCE_DIR, "proto"), os.path.join(checkout, "proto"))
            venv = os.path.join(scratch, "venv")
            # The build tree's package must not shadow the installed one.
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

            def run(*argv):
                result = subprocess.run(argv, cwd=scratch, env=env, capture_output=True,
                                        text=True)
                self.assertEqual(result.returncode, 0, f"{' '.join(argv)}\n{result.stdout}\n"
                                                       f"{result.stderr}")
                return result.stdout

            # Debian's pip (python3-pip) from the system's site-packages: installing a pip of its
            # own into the venv would take longer than the rest of the test.
            run("/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip", venv)
            python = os.path.join(venv, "bin", "python")
            run(python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--quiet",
                os.path.join(checkout, "client", "python"))
            server = Server({"default": DEFAULT_MODEL})
            try:
                layers, heads, queries, keys, tokens = map(int, run(python, "-c", SMOKE,
                                                                    server.address).split())
            finally:
                server.stop()
            self.assertEqual((layers, heads, queries, keys), (1, 4, tokens, tokens))


if __name__ == "__main__":
    unittest.main()
