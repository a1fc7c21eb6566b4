"""The service's tokenizer on the client side (docs/DESIGN-NOTES.md "Text (issue 52)"): Keras'
`TextVectorization` with a vocabulary fitted by a job, applied exactly as the service applies it,
so that a client can feed an exported model what the service's tokenizer gives (no standard ONNX
operator splits and looks up text).

    t = pstrain.text.Tokenizer.from_json(fitted)   # the fitted form's JSON (a dict or its text)
    t.tokens("Hello, world!")                      # ['hello', 'world']
    t.features("Hello, world!")                    # the model's input: a list of floats

Standardization lowers ASCII letters only and strips Keras' punctuation set; splitting is on runs
of ASCII whitespace; n-grams come 1-grams first, joined by one space.
"""
import json
import math

PUNCTUATION = set("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'")
WHITESPACE = " \t\n\v\f\r"


def standardized(text, how="lower_and_strip_punctuation"):
    if how == "none":
        return text
    out = []
    for c in text:
        lower = chr(ord(c) + 32) if "A" <= c <= "Z" else c
        if how == "lower_and_strip_punctuation" and lower in PUNCTUATION:
            continue
        out.append(lower)
    return "".join(out)


def tokens(text, standardize="lower_and_strip_punctuation", ngrams=1):
    s = standardized(text, standardize)
    words, word = [], []
    for c in s:
        if c in WHITESPACE:
            if word:
                words.append("".join(word))
                word = []
        else:
            word.append(c)
    if word:
        words.append("".join(word))
    out = list(words)
    for n in range(2, ngrams + 1):
        out += [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]
    return out


class Tokenizer:
    """A fitted tokenizer: its spec, its vocabulary (the indices after the reserved ones) and, for
    tf_idf, its idf weights."""

    def __init__(self, spec, vocabulary, idf=None):
        self.spec = dict(spec)
        self.vocabulary = list(vocabulary)
        self.idf = list(idf) if idf is not None else None
        self.mode = self.spec.get("output_mode", "int")
        self.reserved = 2 if self.mode == "int" else 1
        self.index_of = {token: self.reserved + i for i, token in enumerate(self.vocabulary)}

    @classmethod
    def from_json(cls, fitted):
        if isinstance(fitted, (str, bytes)):
            fitted = json.loads(fitted)
        return cls(fitted["spec"], fitted["vocabulary"], fitted.get("idf"))

    def tokens(self, text):
        return tokens(text, self.spec.get("standardize", "lower_and_strip_punctuation"), self.spec.get("ngrams", 1))

    def index(self, token):
        return self.index_of.get(token, self.reserved - 1)

    def width(self):
        return self.spec["output_sequence_length"] if self.mode == "int" else self.spec["max_tokens"]

    def features(self, text):
        out = [0.0] * self.width()
        indices = [self.index(t) for t in self.tokens(text)]
        if self.mode == "int":
            for i, k in enumerate(indices[:len(out)]):
                out[i] = float(k)
            return out
        for k in indices:
            out[k] = 1.0 if self.mode == "multi_hot" else out[k] + 1.0
        if self.mode == "tf_idf":
            out = [v * w for v, w in zip(out, self.idf)]
        return out


def idf(documents, holding):
    """Keras' inverse document frequency: log(1 + documents / (1 + documents holding the token))."""
    return math.log(1 + documents / (1 + holding))
