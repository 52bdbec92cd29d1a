"""The admin API's views, one module per area of spec §6: parse → one service or selector call
→ the envelope."""
