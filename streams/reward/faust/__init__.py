"""The Faust engine (``rewardstream reward run --engine faust``): the core run as a faust-streaming app.

Everything only this engine needs lives here, not in the shared core: the app and its table (``engine``),
the lock and the stall watch over the core (``join``), emit-then-mark de-duplication (``emit_then_mark``)
and the read_committed consumer Faust lacks (``read_committed``).
"""
