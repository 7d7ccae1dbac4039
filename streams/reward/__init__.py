"""The reward processor: a pure join/decision core (``join``, ``policy``, ``processor``) and Faust glue (``app``)."""
