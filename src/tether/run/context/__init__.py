"""Fitting a conversation into the model's window: the plan (``plan``), summaries of what is
left out (``summary``) and the fitter that applies them to each request (``fitter``)."""
