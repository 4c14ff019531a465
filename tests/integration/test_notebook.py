"""examples/tour.ipynb runs headlessly (nbclient, a real kernel) against the session
server, and shows the readable reprs it is there to show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "tour.ipynb"


def _outputs(cell: Any, kind: str) -> str:
    """Every output of a cell with this MIME type, concatenated."""
    return "".join(
        str(output.get("data", {}).get(kind, ""))
        for output in cell.get("outputs", [])
        if output.get("output_type") in ("execute_result", "display_data")
    ) + "".join(
        str(output.get("text", ""))
        for output in cell.get("outputs", [])
        if kind == "text/plain" and output.get("output_type") == "stream"
    )


@pytest.mark.timeout(180)
def test_tour_notebook_runs_and_shows_tables(
    server_address: str, unique_name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LIFTBRIDGE_ADDRESS", server_address)
    monkeypatch.setenv("LIFTBRIDGE_TOUR_STREAM", unique_name)
    notebook = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[no-untyped-call]
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        "commit the notebook without outputs"
    )
    NotebookClient(
        notebook, timeout=60, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()  # raises CellExecutionError, with the cell and traceback, if any cell fails

    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    by_source = {cell.source.splitlines()[-1]: cell for cell in code}
    metadata_html = _outputs(by_source["metadata"], "text/html")
    assert "<table>" in metadata_html and unique_name in metadata_html
    assert "__cursors" not in metadata_html
    one_line = _outputs(by_source["print(repr(metadata))  # one short line"], "text/plain")
    assert one_line.startswith("<Metadata brokers=[a@") and "internal" in one_line
    messages_html = _outputs(by_source["liftbridge.messages_table(messages)"], "text/html")
    assert "12 messages" in messages_html and "order-11" in messages_html
    assert _outputs(by_source["list(sub)"], "text/plain") == "[]"
    assert "datetime.datetime(" in _outputs(by_source["messages[0].to_dict()"], "text/plain")
    frame_html = _outputs(by_source['frame.groupby("partition").size()'], "text/plain")
    assert frame_html.strip()
    assert _outputs(by_source['client.fetch_cursor("notebook", stream, 0)'], "text/plain") == "1"
