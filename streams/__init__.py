"""The Faust reward processor, the trainer SDK and replay."""
