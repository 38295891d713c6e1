"""The image's fixtures, one per session: test_image_build.py and test_image.py share the build (the
two files run on one worker: tests/conftest.py RIG_FILES)."""

from __future__ import annotations

import shutil

import pytest

from tests.helpers import image_rig


@pytest.fixture(scope="session")
def image() -> str:
    if shutil.which("buildah") is None:
        pytest.skip("needs buildah (make test-deps)")
    return image_rig.build()


@pytest.fixture(scope="session")
def container(image):
    """A working container of the image; the tests write only under its /tmp or into mounted folders."""
    made = image_rig.buildah("from", image)
    assert made.returncode == 0, made.stderr
    name = made.stdout.strip().splitlines()[-1]
    yield name
    image_rig.buildah("rm", name)
