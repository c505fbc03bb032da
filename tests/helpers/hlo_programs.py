"""HLO text of small scheduled programs, for the replay's tests: a kernel (``k``), a copy to the
host (``d2h``, its done one statement later), a ``while`` (trip count known or not) or a ``call`` of
statements, nested; ``program_text`` turns a list of statements into a module's text.  Pieces for
hand-written modules: ``SUM`` (an all-reduce's reduction), ``COND`` (a loop's condition over an
(s32[], f32[8]) carry) and ``chain_lines`` (elementwise kernels one after another, one result copied
to the host)."""

from __future__ import annotations

T = "f32[64,64]{1,0}"
HOST = "f32[64,64]{1,0:S(5)}"
LOOP_T = f"(s32[], {T})"

# the reduction of an all-reduce or reduce-scatter (``to_apply=%sum``)
SUM = """%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(%a, %b)
}"""
# a while loop's condition over an (s32[], f32[8]) carry (``condition=%cond``)
COND = """%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]{0}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  ROOT %lt = pred[] compare(%ci, %ci), direction=LT
}"""


def chain_lines(kernels: int, shape: str, host: str, copy_of: int, done_after: int) -> list[str]:
    """An entry's lines: ``%x`` then kernels ``k0``... each of the one before (exponential, negate in
    turn), kernel *copy_of*'s result copied to the host (``cs``), its done (``cd``) after kernel
    *done_after*."""
    lines = [f"  %x = {shape} parameter(0)"]
    prev = "x"
    for i in range(kernels):
        lines.append(f"  %k{i} = {shape} {'negate' if i % 2 else 'exponential'}(%{prev})")
        prev = f"k{i}"
        if i == copy_of:
            lines.append(f"  %cs = ({host}, {shape}, u32[]) copy-start(%k{i})")
        if i == done_after:
            lines.append(f"  %cd = {host} copy-done(%cs)")
    return lines


class HloProgram:
    """HLO text of a program of statements: a kernel (``k``), a copy to the host (``d2h``, its done
    one statement later), a ``while`` (trip count known or not) or a ``call`` of statements."""

    def __init__(self) -> None:
        self.n = 0
        self.comps: list[str] = []

    def name(self, stem: str) -> str:
        self.n += 1
        return f"{stem}.{self.n}"

    def body(self, stmts: list, cur: str, lines: list[str]) -> str:
        """Lines for *stmts* on value *cur*; the last value."""
        pending: list[str] = []
        for s in stmts:
            for done in pending:
                lines.append(f"  %{self.name('cd')} = {HOST} copy-done(%{done})")
            pending = []
            if s[0] == "k":
                new = self.name("k")
                lines.append(f"  %{new} = {T} {'negate' if self.n % 2 else 'exponential'}(%{cur})")
                cur = new
            elif s[0] == "d2h":
                start = self.name("cs")
                lines.append(f"  %{start} = ({HOST}, {T}, u32[]) copy-start(%{cur})")
                pending.append(start)
            elif s[0] == "while":
                cur = self.loop(s[1], s[2], cur, lines)
            else:
                fn, out = self.name("fn"), self.name("call")
                inner = [f"  %{fn}.a = {T} parameter(0)"]
                last = self.body(s[1], f"{fn}.a", inner)
                inner.append(f"  ROOT %{fn}.r = {T} copy(%{last})")
                self.comps.append(f"%{fn} (a: f32[64,64]) -> f32[64,64] {{\n" + "\n".join(inner) + "\n}")
                lines.append(f"  %{out} = {T} call(%{cur}), to_apply=%{fn}")
                cur = out
        for done in pending:
            lines.append(f"  %{self.name('cd')} = {HOST} copy-done(%{done})")
        return cur

    def loop(self, trips: int | None, stmts: list, cur: str, lines: list[str]) -> str:
        b, c, w = self.name("body"), self.name("cond"), self.name("while")
        # no trip count: a bound the condition cannot tell (read from the carried counter itself)
        bound = f"s32[] constant({trips})" if trips else f"s32[] get-tuple-element(%{c}.p), index=0"
        inner = [
            f"  %{b}.p = {LOOP_T} parameter(0)",
            f"  %{b}.i = s32[] get-tuple-element(%{b}.p), index=0",
            f"  %{b}.x = {T} get-tuple-element(%{b}.p), index=1",
            f"  %{b}.one = s32[] constant(1)",
            f"  %{b}.inc = s32[] add(%{b}.i, %{b}.one)",
        ]
        last = self.body(stmts, f"{b}.x", inner)
        inner.append(f"  ROOT %{b}.t = {LOOP_T} tuple(%{b}.inc, %{last})")
        self.comps.append(f"%{b} (p: (s32[], f32[64,64])) -> (s32[], f32[64,64]) {{\n" + "\n".join(inner) + "\n}")
        self.comps.append(
            f"%{c} (p: (s32[], f32[64,64])) -> pred[] {{\n  %{c}.p = {LOOP_T} parameter(0)\n"
            f"  %{c}.i = s32[] get-tuple-element(%{c}.p), index=0\n  %{c}.n = {bound}\n"
            f"  ROOT %{c}.lt = pred[] compare(%{c}.i, %{c}.n), direction=LT\n}}"
        )
        config = f', backend_config={{"known_trip_count":{{"n":"{trips}"}}}}' if trips else ""
        lines.append(f"  %{w}.in = {LOOP_T} tuple(%zero, %{cur})")
        lines.append(f"  %{w} = {LOOP_T} while(%{w}.in), condition=%{c}, body=%{b}{config}")
        lines.append(f"  %{w}.out = {T} get-tuple-element(%{w}), index=1")
        return f"{w}.out"


def program_text(stmts: list) -> str:
    h = HloProgram()
    lines = [f"  %x = {T} parameter(0)", "  %zero = s32[] constant(0)"]
    last = h.body(stmts, "x", lines)
    lines.append(f"  ROOT %out = {T} negate(%{last})")
    entry = "ENTRY %main (x: f32[64,64]) -> f32[64,64] {\n" + "\n".join(lines) + "\n}"
    return "HloModule random_step, is_scheduled=true\n\n" + "\n\n".join([*h.comps, entry]) + "\n"
