"""The build hook of pyproject.toml: protoc's modules are generated into the built package
(attnscope/v1) rather than committed, from the proto files of the checkout."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from generate_stubs import generate  # noqa: E402


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        generate(self.build_lib)


setup(cmdclass={"build_py": BuildWithStubs})
