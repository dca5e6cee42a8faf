"""Repository tooling over the result files: the figures the READMEs quote and the bench report."""
