"""What the load generator reads, apart from what runs the load: the corpus of texts (corpus),
the voices and their mix (voices), the WebSocket dialects (presets), the HTTP request body
(bodies), text paced as a language model writes it (pacing) and the arrivals a trace replays
(trace). Each file a user gives is checked here, with one sentence per mistake."""
