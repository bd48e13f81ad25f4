"""A browser tab for the lecture benchmark: it reads buttons, metrics and texts, and presses.

``st_client.Session`` moves sliders and checkboxes; a lecture also presses buttons (the teacher's
Start and Reveal, a phone's vote) and ticks ``run_every`` fragments (a phone's question polls the
room). As the frontend does, a press inside a fragment reruns only that fragment (its
``fragment_id`` goes with the trigger), and a tick is a fragment rerun marked ``is_auto_rerun``.
"""

from __future__ import annotations

import time
from typing import Any

from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: TID251  (the wire format only)

from benchmarks import st_client

FINISHED = ("FINISHED_SUCCESSFULLY", "FINISHED_FRAGMENT_RUN_SUCCESSFULLY")


class Tab(st_client.Session):
    """A browser tab: a session that also reads buttons (and their fragments), metrics, texts."""

    def __init__(self, base: str, cookies: dict[str, str]) -> None:
        super().__init__(base, cookies)
        self.buttons: dict[str, str] = {}
        self.fragments: dict[str, str] = {}  # button key -> the fragment that draws it
        self.metrics: list[str] = []
        self.texts: list[str] = []

    def _delta(self, fm: Any, elements: dict, result: st_client.RunResult) -> None:
        st_client.Session._delta(fm, elements, result)
        if fm.delta.WhichOneof("type") != "new_element":
            return
        el = fm.delta.new_element
        kind = el.WhichOneof("type")
        if kind == "button":
            key = st_client._user_key(el.button.id)
            self.buttons[key] = el.button.id
            self.fragments[key] = fm.delta.fragment_id
        elif kind == "metric":
            self.metrics.append(el.metric.body)
        elif kind in ("markdown", "alert"):
            self.texts.append(getattr(el, kind).body)

    def _clear(self) -> None:
        self.buttons.clear()
        self.metrics.clear()
        self.texts.clear()

    async def open(self, page: str, query: str) -> st_client.RunResult:
        """Open ``page?query`` (the first run of a tab, or a page switch)."""
        self._clear()
        return await self.run(page=page, query=query)

    async def rerun(self) -> st_client.RunResult:
        """Rerun the current page as it is."""
        self._clear()
        return await self.run(query=self.query)

    async def fragment_run(self, fragment_id: str, button: str = "") -> st_client.RunResult:
        """A button press (its fragment only reruns) or, without one, a ``run_every`` tick."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string, cs.page_name, cs.page_script_hash = self.query, self.page, self.page_hash
        if fragment_id:
            cs.fragment_id = fragment_id
        if button:
            state = cs.widget_states.widgets.add()
            state.id = self.buttons[button]
            state.trigger_value = True
        else:
            cs.is_auto_rerun = True
        self._clear()
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        return await self._read_run(t0)

    async def press(self, key: str) -> st_client.RunResult:
        """Press the button ``key`` of the last run (inside its fragment, as the frontend)."""
        return await self.fragment_run(self.fragments.get(key, ""), key)
