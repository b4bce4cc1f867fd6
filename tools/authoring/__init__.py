"""Authoring aids: the chapter template, draft -> notebook, the Colab cell."""
