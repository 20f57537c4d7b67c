"""A local stand-in for the competition's time-series API: it serves the test files one visit month at a time.

Usage:
    env = MockApi()
    for test_clinical, test_peptides, test_proteins, sample_submission in env.iter_test():
        ...  # fill sample_submission["rating"]
        env.predict(sample_submission)
When every group has been predicted, the predictions are written to submission.csv.
"""
from typing import Iterator, Sequence, Tuple

import pandas as pd


class MockApi:
    def __init__(self, input_paths: Sequence[str] = ("example_test_files/test.csv",
                                                   "example_test_files/test_peptides.csv",
                                                   "example_test_files/test_proteins.csv",
                                                   "example_test_files/sample_submission.csv"),
                 group_id_column: str = "visit_month", export_group_id_column: bool = True,
                 output_path: str = "submission.csv"):
        if len(input_paths) < 2:
            raise ValueError("the API serves at least two files, e.g. test.csv and sample_submission.csv")
        self.input_paths = list(input_paths)
        self.group_id_column = group_id_column
        self.export_group_id_column = export_group_id_column
        self.output_path = output_path
        self._status = "initialized"
        self.predictions = []

    def iter_test(self) -> Iterator[Tuple[pd.DataFrame, ...]]:
        """Yield, for each group (in order of first appearance in the first file), that group's rows of each file."""
        if self._status != "initialized":
            raise Exception("iter_test() can only be iterated once")
        frames = [pd.read_csv(path, low_memory=False) for path in self.input_paths]
        groups = frames[0][self.group_id_column].drop_duplicates().tolist()
        for group in groups:
            self._status = "prediction_needed"
            parts = []
            for frame in frames:
                part = frame[frame[self.group_id_column] == group].copy()
                if not self.export_group_id_column:
                    part = part.drop(columns=[self.group_id_column])
                parts.append(part.reset_index(drop=True))
            yield tuple(parts)
            if self._status != "prediction_received":
                raise Exception("call predict() with this group's predictions before asking for the next group")
        pd.concat(self.predictions).to_csv(self.output_path, index=False)
        self._status = "finished"

    def predict(self, user_predictions: pd.DataFrame) -> None:
        """Register the predictions of the current group."""
        if self._status == "finished":
            raise Exception("the whole test set has already been predicted")
        if self._status != "prediction_needed":
            raise Exception("get the next group from iter_test() first")
        if not isinstance(user_predictions, pd.DataFrame):
            raise Exception("predictions must be a pandas DataFrame")
        self.predictions.append(user_predictions)
        self._status = "prediction_received"


def make_env() -> MockApi:
    return MockApi()
