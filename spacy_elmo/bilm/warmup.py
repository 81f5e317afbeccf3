"""Warm-up text for the "warm" state policy: plain running English, written for this project.

It is read once, in one row with carried state, to reach the state a biLM is in between two
sentences of ordinary text. Tokens follow the Moses-like tokenization of the training data.
"""

WARMUP_SENTENCES = [
    s.split()
    for s in (
        "The meeting was moved to Thursday because several members could not attend .",
        "She said the new bridge would open to traffic early next year .",
        "Prices rose by 3 percent in the second quarter , the report showed .",
        "Many of the visitors had travelled for hours to see the exhibition .",
        '" We are still waiting for an answer , " he told reporters on Monday .',
        "The company , which employs about 2,000 people , plans to expand abroad .",
        "After the rain stopped , the children went back outside to play .",
        "Officials did not say when the investigation would be completed .",
        "It was the first time in a decade that the team had won the title .",
        "Scientists hope the results will help them understand how the disease spreads .",
        "The city council voted 7 to 2 in favour of the proposal .",
        "He has written three books and teaches history at a local college .",
    )
]
