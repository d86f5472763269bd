"""checkpoint_for against the shared vectors in sdk/testdata/checkpoint_for.json."""

import json
import os
import unittest

from sbx import checkpoint_for

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "..", "testdata", "checkpoint_for.json")


class CheckpointForVectors(unittest.TestCase):
    def test_shared_vectors(self) -> None:
        with open(VECTORS) as f:
            cases = json.load(f)["cases"]
        self.assertGreater(len(cases), 50)
        for cmd, want in cases:
            with self.subTest(cmd=cmd):
                self.assertEqual(checkpoint_for(cmd), want)

    def test_extra_cases(self) -> None:
        # Cases beyond the shared vectors, with the kinds the Go reference
        # (undo/classify.go) gives: the three SDKs agree on every input.
        extra = [
            ("echo x>/etc/passwd", "checkpoint"),       # redirection glued to a word
            ("ls # rm -rf /", "none"),                  # no comments: words of ls
            ('echo "$(rm x)"', "checkpoint"),           # substitution inside double quotes
            ("echo hi >&2", "none"),
            ("sed -i '/^#/d' conf", "git"),             # sed's script is not a path
            ("curl -XPOST https://x.test", "git"),      # a short bundle holding O
            ("dd if=/dev/zero of=/dev/sda", "checkpoint"),  # the path rule looks at of=
            ("git -C /x reset --hard", "git"),
            ("bash -lc 'rm -rf /'", "checkpoint"),
            ("rm -rf $HOME", "checkpoint"),             # a variable: the path is not known
            ("echo a | tee -a /etc/hosts", "checkpoint"),
            ("command -v git", "none"),
            ("kill 1; ls", "fork"),
        ]
        for cmd, want in extra:
            with self.subTest(cmd=cmd):
                self.assertEqual(checkpoint_for(cmd), want)


if __name__ == "__main__":
    unittest.main()
