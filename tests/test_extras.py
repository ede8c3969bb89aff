import sys

import numpy as np
import pytest

from sqa.data.pitch import F0Extractor
from sqa.extras import MissingExtraError, require


def test_require_returns_the_module():
    assert require("json", "train", "anything").dumps([1]) == "[1]"


def test_require_names_the_extra_for_a_missing_package():
    with pytest.raises(MissingExtraError, match=r"f0 extraction.*'no_such_package'.*sqa\[pitch\]"):
        require("no_such_package", "pitch", "f0 extraction")


@pytest.mark.parametrize(("method", "module"), [("dio", "pyworld"), ("fcpe", "torchfcpe")])
def test_pitch_without_its_extra_says_which_to_install(monkeypatch, tmp_path, method, module):
    # A None entry in sys.modules makes `import module` raise ImportError, as if it were absent.
    monkeypatch.setitem(sys.modules, module, None)
    extractor = F0Extractor(method=method, cache_dir=tmp_path)
    with pytest.raises(MissingExtraError, match=r"sqa\[pitch\]"):
        extractor.compute(np.zeros(1600, dtype=np.float32), 16000)
