"""External formats only: HAMi annotation codecs, extender and admission payloads."""
