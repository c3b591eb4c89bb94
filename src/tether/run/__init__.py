"""The engine: the loop (``loop``) driving a ``RunHost`` (``host``), the gate, running the
allowed calls, pausing and resuming, interrupts, the repeat rule, and fitting a
conversation into the model's window (``context``). It never imports the facade
(``tether.agent``)."""
