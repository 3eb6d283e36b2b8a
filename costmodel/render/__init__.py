"""Results and every output format (LaTeX, Markdown, HTML, Jupyter, charts); nothing here calls a verb."""
