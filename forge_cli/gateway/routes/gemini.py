"""The Gemini API (``/v1beta/models/…``): being built."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
