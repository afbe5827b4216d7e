"""Languages and scripts: how text splits into words, and the per-language filter settings.

* ``scripts``: which characters belong to scripts written without spaces between words (Han,
  kana, Thai, Lao, Khmer, Myanmar, Tibetan), and ``space_out``, the character rule that makes
  each of them a token of its own: what MinHash shingles and decontamination windows use, for
  any language.
* ``segmenters``: a word splitter per language: whitespace where the script has spaces, a
  segmenter where it does not (Japanese: fugashi + unidic-lite; Chinese: jieba; Thai: pythainlp),
  and the character rule for any other spaceless script.
* ``profiles``: the languages whose filter thresholds were calibrated on real text, what each
  changes in the filter sections (stop words, word lengths, sentence marks, short lines), and
  ``profile_for(code)``; a language outside the table runs only the script-independent blocks.
"""
