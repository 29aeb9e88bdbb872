"""What every benchmark case keeps: the per-call time of each round, in the unit its name says.
The best round is the figure (least disturbed by the rest of the machine); the median says how
noisy the run was."""

import statistics


class Rounds(list):
    @property
    def best(self):
        return min(self)

    @property
    def median(self):
        return statistics.median(self)
