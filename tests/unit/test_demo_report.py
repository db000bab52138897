"""The demo's HTML report shows values for people, not Python's reprs."""

from edgetune.demo.report import cell, write_html


def test_cells_read_as_text():
    assert cell(["orin-2"]) == "orin-2" and cell(["orin-1", "orin-2"]) == "orin-1, orin-2"
    assert cell(True) == "yes" and cell(False) == "no"
    assert cell(15.136054669983668) == "15.14" and cell(0.000123456) == "0.0001235"
    assert cell(None) == "–" and cell([]) == "–" and cell(7) == "7"
    assert cell({"revision": 3, "applied": True}) == "revision: 3; applied: yes"


def test_the_page_has_no_python_reprs(tmp_path):
    page = write_html(tmp_path, [("Budget change", "note", [{"nodes": ["orin-2"], "within": True,
                                                              "power W": 15.136054669983668}])], [], "headline")
    text = page.read_text()
    assert "orin-2" in text and "yes" in text and "15.14" in text
    assert "['orin-2']" not in text and "True" not in text and "15.136054669983668" not in text
